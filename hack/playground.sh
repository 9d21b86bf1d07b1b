#!/usr/bin/env bash
# A playground on this machine: the controller, unchanged, against a local control plane whose kubelets
# kwok simulates and the fake Azure Resource Manager. No Azure account and no container runtime needed.
#
#   hack/playground.sh up     build the controller and the fake ARM (cargo, debug profile), start the
#                             control plane (hack/e2e-cluster.sh, built from pinned Go modules on first use),
#                             the fake ARM (`fake-arm`: VMs boot into kwok Nodes) and
#                             `karpenter-azure controller` configured only through its environment, install
#                             the CRDs, apply examples/aksnodeclass-default.yaml and
#                             examples/nodepool-general.yaml, wait until both are Ready, and print how to
#                             point kubectl at it (`make playground`)
#   hack/playground.sh down   stop exactly the processes `up` recorded, and nothing else
#                             (`make playground-down`)
#   hack/playground.sh env    print the line that points kubectl at the playground (KUBECONFIG, and PATH
#                             with the control plane's own kubectl first)
#
# PLAYGROUND_NO_BUILD=1 skips the build and uses the binaries already in the cargo target directory: the
# playground e2e test runs inside `cargo test`, which holds cargo's build lock, and hack/test.sh builds them.
#
# Its state (pid files, logs, kubeconfig, PKI, the controller's settings) lives in
# ${PLAYGROUND_DIR:-<cargo target dir>/playground}, never in the repository:
#   cluster/                  the control plane (hack/e2e-cluster.sh start <dir>): its pids, logs, kubeconfig
#   fake-arm.pid              "<pid> <start time>" of each process started here; `down` signals a pid only
#   controller.pid            while it still names the same process (start time in /proc/<pid>/stat)
#   fake-arm.env              the settings the fake ARM wrote for the controller (endpoints, credential)
#   controller.env            the controller's whole environment
#   logs/                     fake-arm.log, controller.log
#   bin/kubectl               the control plane's kubectl; env                  what `env` prints
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
READY_TIMEOUT="${PLAYGROUND_READY_TIMEOUT:-120}"
# Nodes never dial it (kwok plays their kubelet), but the VMs' custom data carries it, as on AKS.
CLUSTER_NAME=playground
BOOTSTRAP_TOKEN=abcdef.0123456789abcdef
SSH_PUBLIC_KEY="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlaygroundPlaygroundPlaygroundPlaygroundPl playground"

log() { printf '[playground] %s\n' "$*" >&2; }
die() { printf '[playground] ERROR: %s\n' "$*" >&2; exit 1; }

target_dir() {
  (cd "$REPO" && "$CARGO" metadata --format-version 1 --no-deps) |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

state_dir() {
  if [[ -n "${PLAYGROUND_DIR:-}" ]]; then printf '%s\n' "$PLAYGROUND_DIR"; else printf '%s/playground\n' "$(target_dir)"; fi
}

# ---------------------------------------------------------------------------------------------
# processes: recorded as "<pid> <start time>", so a pid the system has since given to another
# process is never signalled
# ---------------------------------------------------------------------------------------------
start_time() { # <pid>: the start time (clock ticks since boot) of a live, not zombie, process
  local stat fields
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  # shellcheck disable=SC2206 # the fields after "(comm) " are space separated
  fields=(${stat##*) })
  [[ "${fields[0]}" != Z && "${fields[0]}" != X ]] || return 1
  printf '%s\n' "${fields[19]}"
}

record() { # <name> <pid>
  local started
  started="$(start_time "$2")" || die "$1 (pid $2) exited at once; see $DIR/logs/$1.log"
  printf '%s %s\n' "$2" "$started" >"$DIR/$1.pid"
}

recorded_pid() { # <name>: the recorded pid while it still names the process started here
  local f="$DIR/$1.pid" pid started
  [[ -f "$f" ]] || return 1
  read -r pid started <"$f" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ "$(start_time "$pid" 2>/dev/null)" == "$started" ]] || return 1
  printf '%s\n' "$pid"
}

stop_process() { # <name> <seconds>: SIGTERM, then SIGKILL once <seconds> have passed
  local name=$1 wait_s=$2 pid i
  if pid="$(recorded_pid "$name")"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait_s * 10; i++)); do
      recorded_pid "$name" >/dev/null || break
      sleep 0.1
    done
    if recorded_pid "$name" >/dev/null; then
      log "$name (pid $pid) did not stop within ${wait_s}s of SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$DIR/$name.pid"
}

free_ports() { # <n>
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

wait_until() { # <name> <what> <command...>: poll until the command succeeds, while <name> runs
  local name=$1 what=$2 deadline
  shift 2
  deadline=$(($(date +%s) + READY_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if ! recorded_pid "$name" >/dev/null; then
      tail -n 20 "$DIR/logs/$name.log" >&2 || true
      die "$name exited while waiting for $what; see $DIR/logs/$name.log"
    fi
    (($(date +%s) < deadline)) || die "timed out after ${READY_TIMEOUT}s waiting for $what; see $DIR/logs/$name.log"
    sleep 0.3
  done
}

env_line() {
  # shellcheck disable=SC2016 # $PATH is for the shell that runs the line
  printf 'export KUBECONFIG=%q PATH=%q:$PATH\n' "$DIR/cluster/kubeconfig" "$DIR/bin"
}

# ---------------------------------------------------------------------------------------------
# up / down
# ---------------------------------------------------------------------------------------------
running_parts() { # the names of the recorded processes that still run
  local name
  for name in controller fake-arm; do recorded_pid "$name" >/dev/null && printf '%s\n' "$name"; done
  [[ -f "$DIR/cluster/etcd.pid" ]] && printf 'control plane\n'
  return 0
}

print_usage_hint() {
  cat <<EOF
Point kubectl at the playground (this shell):
  $(env_line)
Then try:
  kubectl apply -f examples/inflate.yaml          # 5 pods of 1 CPU that no node can take
  kubectl get nodeclaims -w                       # NodeClaims launch as fake VMs, which join as Nodes
  kubectl scale deployment inflate --replicas=0   # the empty nodes are consolidated away
Logs: $DIR/logs/controller.log, $DIR/logs/fake-arm.log. Stop everything: make playground-down
EOF
}

cmd_up() {
  local t0 t_build target apiserver fake_url metrics_port health_port
  t0=$(date +%s)
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  if [[ -n "$(running_parts)" ]]; then
    if [[ "$(running_parts | wc -l)" -eq 3 ]]; then
      log "already running in $DIR"
      print_usage_hint
      return 0
    fi
    die "partly running in $DIR ($(running_parts | paste -sd, -)); run: make playground-down"
  fi
  command -v python3 >/dev/null || die "python3 is required"

  target="$(target_dir)"
  if [[ "${PLAYGROUND_NO_BUILD:-}" == 1 ]]; then
    local bin
    for bin in karpenter-azure fake-arm; do
      [[ -x "$target/debug/$bin" ]] ||
        die "PLAYGROUND_NO_BUILD=1 but $target/debug/$bin is missing; run: $CARGO build -p karpenter-azure -p fake-azure --bins"
    done
  else
    log "building the controller and the fake ARM ($CARGO build; the first build takes several minutes) ..."
    (cd "$REPO" && "$CARGO" build -p karpenter-azure -p fake-azure --bins) || die "$CARGO build failed"
  fi
  t_build=$(($(date +%s) - t0))

  rm -rf "${DIR:?}/logs" "${DIR:?}/bin" "$DIR"/*.env "$DIR/env"
  mkdir -p "$DIR/logs" "$DIR/bin"
  trap 'rc=$?; if ((rc != 0)); then log "start failed; stopping what was started"; cmd_down; fi' EXIT

  # The control plane (its binaries are built into ~/.cache/karpenter-azure on first use).
  "$REPO/hack/e2e-cluster.sh" start "$DIR/cluster"
  # APISERVER_URL, BIN_DIR, ...
  # shellcheck disable=SC1091 # written by e2e-cluster.sh start
  source "$DIR/cluster/env"
  apiserver="$APISERVER_URL"
  ln -sf "$BIN_DIR/kubectl" "$DIR/bin/kubectl"
  local kubectl=("$DIR/bin/kubectl" --kubeconfig "$DIR/cluster/kubeconfig")

  "$target/debug/fake-arm" --kubeconfig "$DIR/cluster/kubeconfig" --env-file "$DIR/fake-arm.env" \
    </dev/null >"$DIR/logs/fake-arm.log" 2>&1 &
  record fake-arm $!
  wait_until fake-arm "the fake ARM to listen" test -s "$DIR/fake-arm.env"
  fake_url="$(sed -n 's/^ARM_ENDPOINT=//p' "$DIR/fake-arm.env")"

  "${kubectl[@]}" apply --server-side -f "$REPO/crds/" >/dev/null
  "${kubectl[@]}" wait --for condition=Established --timeout=60s -f "$REPO/crds/" >/dev/null

  read -r metrics_port health_port <<<"$(free_ports 2)"
  {
    cat "$DIR/fake-arm.env"
    printf '%s\n' \
      "KUBECONFIG=$DIR/cluster/kubeconfig" \
      "CLUSTER_NAME=$CLUSTER_NAME" \
      "CLUSTER_ENDPOINT=$apiserver" \
      "KUBELET_BOOTSTRAP_TOKEN=$BOOTSTRAP_TOKEN" \
      "SSH_PUBLIC_KEY=$SSH_PUBLIC_KEY" \
      "LOG_FORMAT=text" \
      "METRICS_PORT=$metrics_port" \
      "HEALTH_PROBE_PORT=$health_port"
  } >"$DIR/controller.env"
  chmod 600 "$DIR/controller.env"
  local settings
  mapfile -t settings <"$DIR/controller.env"
  env -i PATH="$PATH" HOME="$HOME" "${settings[@]}" "$target/debug/karpenter-azure" controller \
    </dev/null >"$DIR/logs/controller.log" 2>&1 &
  record controller $!
  wait_until controller "the controller's /readyz" curl -fsS "http://127.0.0.1:$health_port/readyz"

  "${kubectl[@]}" apply -f "$REPO/examples/aksnodeclass-default.yaml" -f "$REPO/examples/nodepool-general.yaml" >/dev/null
  wait_until controller "AKSNodeClass default and NodePool general to be Ready" \
    "${kubectl[@]}" wait --for condition=Ready --timeout=5s aksnodeclass/default nodepool/general

  env_line >"$DIR/env"
  trap - EXIT
  log "up in $(($(date +%s) - t0))s (build ${t_build}s): kube-apiserver $apiserver, fake ARM $fake_url," \
    "controller pid $(recorded_pid controller) (metrics http://127.0.0.1:$metrics_port/metrics)"
  print_usage_hint
}

cmd_down() {
  [[ -d "$DIR" ]] || { log "nothing to stop: $DIR does not exist"; return 0; }
  DIR="$(cd "$DIR" && pwd)"
  # The controller first (SIGTERM: it releases its lease), then the fake it calls, then the cluster.
  stop_process controller 30
  stop_process fake-arm 10
  if [[ -d "$DIR/cluster" ]]; then
    "$REPO/hack/e2e-cluster.sh" stop "$DIR/cluster"
    # the logs stay for inspection; the etcd data (over 100 MB of preallocated WAL) is only bulk
    rm -rf "$DIR/cluster/etcd-data"
  fi
  rm -f "$DIR/env"
  log "stopped; logs stay in $DIR/logs and $DIR/cluster/logs"
}

cmd_env() {
  [[ -f "$DIR/env" ]] || die "the playground is not up (no $DIR/env); run: make playground"
  cat "$DIR/env"
}

DIR="$(state_dir)"
case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  *) die "usage: $0 up | down | env" ;;
esac
