#!/usr/bin/env bash
# Local Kubernetes control plane for end-to-end tests, built from source via the Go module proxy.
#
#   hack/e2e-cluster.sh build          build (or reuse) the pinned binaries; prints the bin dir
#   hack/e2e-cluster.sh start <dir>    start etcd, kube-apiserver, kube-controller-manager,
#                                      kube-scheduler and kwok on free loopback ports
#   hack/e2e-cluster.sh stop <dir>     stop exactly the processes recorded under <dir>
#   hack/e2e-cluster.sh restart <dir> <component> [seconds]
#                                      stop one component and start it again with the same command
#                                      line after an outage of [seconds]; waits until it serves again
#   hack/e2e-cluster.sh compact <dir>  compact etcd's history up to its current revision, so that a
#                                      watch resuming from an older resourceVersion must list again
#   hack/e2e-cluster.sh versions       print the pinned versions and the cache key
#
# Versions are pinned by the helper modules in hack/controlplane/{kube,etcd,kwok,helm}/go.mod.
# Binaries are cached outside the repository in
#   ${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/controlplane/<key>/bin
# See hack/controlplane/README.md.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CP_DIR="$HACK_DIR/controlplane"

log() { printf '[e2e-cluster] %s\n' "$*" >&2; }
die() { printf '[e2e-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# versions (single source of truth: the helper go.mod files)
# ---------------------------------------------------------------------------------------------
modver() { # <module dir> <module path>
  local v
  v="$(awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' \
    "$CP_DIR/$1/go.mod")"
  [[ -n "$v" ]] || die "cannot find $2 in $CP_DIR/$1/go.mod"
  printf '%s' "$v"
}
K8S_VERSION="$(modver kube k8s.io/kubernetes)"
ETCD_VERSION="$(modver etcd go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(modver kwok sigs.k8s.io/kwok)"
HELM_VERSION="$(modver helm helm.sh/helm/v3)"
CACHE_KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
CACHE_ROOT="${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/controlplane"
BIN_DIR="$CACHE_ROOT/$CACHE_KEY/bin"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)

# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------
k8s_version_ldflags() {
  local rest="${K8S_VERSION#v}" major minor p out=""
  major="${rest%%.*}"; rest="${rest#*.}"; minor="${rest%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    out+=" -X $p.gitCommit= -X $p.gitTreeState=clean -X $p.buildDate=$BUILD_DATE"
  done
  printf '%s' "$out"
}

go_build() { # <name> <module dir> <package> [extra ldflags] [tags]
  local name=$1 mod=$2 pkg=$3 ldx=${4:-} tags=${5:-} t0 t1
  if [[ -x "$BIN_DIR/$name" ]]; then return 0; fi
  log "building $name ($pkg) ..."
  t0=$(date +%s)
  (
    cd "$CP_DIR/$mod"
    CGO_ENABLED=0 nice -n "${E2E_BUILD_NICE:-10}" go build -mod=readonly -buildvcs=false -trimpath ${tags:+-tags=$tags} \
      -ldflags "-s -w$ldx" -o "$BIN_DIR/.$name.tmp" "$pkg"
  ) >>"$BUILD_LOG" 2>&1 || die "go build of $name failed; see $BUILD_LOG"
  mv -f "$BIN_DIR/.$name.tmp" "$BIN_DIR/$name"
  t1=$(date +%s)
  printf '%s %s %ss\n' "$(date -u +%FT%TZ)" "$name" "$((t1 - t0))" >>"$BIN_DIR/../build-times.txt"
  log "built $name in $((t1 - t0))s"
}

all_built() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

cmd_build() {
  if ! all_built; then
    command -v go >/dev/null || die "go is required to build the control plane binaries"
    mkdir -p "$BIN_DIR"
    BUILD_LOG="$CACHE_ROOT/$CACHE_KEY/build.log"
    BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    # serialise concurrent builds (e.g. parallel test binaries) on the same cache key
    exec 9>"$CACHE_ROOT/$CACHE_KEY/.build.lock"
    flock 9
    local kl; kl="$(k8s_version_ldflags)"
    go_build etcd etcd go.etcd.io/etcd/server/v3
    go_build kube-apiserver kube k8s.io/kubernetes/cmd/kube-apiserver "$kl" selinux,notest,grpcnotrace
    go_build kube-controller-manager kube k8s.io/kubernetes/cmd/kube-controller-manager "$kl" selinux,notest,grpcnotrace
    go_build kube-scheduler kube k8s.io/kubernetes/cmd/kube-scheduler "$kl" selinux,notest,grpcnotrace
    go_build kubectl kube k8s.io/kubernetes/cmd/kubectl "$kl" selinux,notest,grpcnotrace
    go_build kwok kwok sigs.k8s.io/kwok/cmd/kwok " -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
    go_build helm helm helm.sh/helm/v3/cmd/helm " -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    flock -u 9
  fi
  printf '%s\n' "$BIN_DIR"
}

# ---------------------------------------------------------------------------------------------
# start / stop
# ---------------------------------------------------------------------------------------------
COMPONENTS=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)
SERVICE_CIDR="${E2E_SERVICE_CIDR:-10.96.0.0/16}"
POD_CIDR="${E2E_POD_CIDR:-10.244.0.0/16}"
# The API server's name as nodes see it (an AKS cluster's FQDN, the e2e controller's CLUSTER_ENDPOINT):
# its serving certificate covers it, so a simulated kubelet verifies the server by that name.
E2E_APISERVER_NAME="${E2E_APISERVER_NAME:-e2e-cluster-dns.hcp.eastus.azmk8s.io}"
# Which nodes kwok manages (it fakes their kubelet). Default: every node, since no real kubelet exists.
# E.g. E2E_KWOK_MANAGE='--manage-nodes-with-label-selector=karpenter.sh/nodepool'
KWOK_MANAGE="${E2E_KWOK_MANAGE:---manage-all-nodes=true}"
# Nodes kwok leaves the status of alone, so a test can make one NotReady as a stopped kubelet would
# (kwok otherwise sets it Ready again at once); kwok still renews their Lease. kwok marks the flag
# deprecated in favour of Stage selectors; when it goes, add the same selector to the node stages.
KWOK_DISREGARD="${E2E_KWOK_DISREGARD:---disregard-status-with-annotation-selector=e2e.karpenter-azure.io/kubelet-stopped=true}"
START_TIMEOUT="${E2E_START_TIMEOUT:-90}"
# E2E_APISERVER_EXTRA_ARGS: extra kube-apiserver flags (e.g. --feature-gates=...), split on whitespace.
# E2E_CLUSTER_WATCH_PID: stop the cluster automatically once this process (e.g. the test runner) exits.

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

free_ports() { # <n> : prints n distinct free loopback TCP ports
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

running() { # <pid> : true if the process exists and is not a zombie waiting to be reaped
  local st
  [[ -r "/proc/$1/stat" ]] || return 1
  st="$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$st" && "$st" != Z && "$st" != X ]]
}

cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null; echo; } # <pid>

recorded_pid() { # <dir> <component> : prints the recorded pid if it still runs the binary we started
  local f="$1/$2.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  running "$pid" || return 1
  cmdline "$pid" | { read -r c; [[ "$c" == *"/$2 "* ]]; } || return 1
  printf '%s' "$pid"
}

pid_alive() { recorded_pid "$@" >/dev/null; }

gen_pki() { # <pki dir>
  local d=$1 n
  mkdir -p "$d"
  (
    cd "$d"
    umask 077
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
    key ca
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=karpenter-azure-e2e-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out ca.crt 2>/dev/null
    sign() { # <name> <subject> <extfile-content>
      key "$1"
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 365 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:${SERVICE_CIDR%.*/*}.1,DNS:localhost,DNS:$E2E_APISERVER_NAME,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign admin "/O=system:masters/CN=kubernetes-admin" "$client"
    sign kube-controller-manager "/CN=system:kube-controller-manager" "$client"
    sign kube-scheduler "/CN=system:kube-scheduler" "$client"
    sign kwok "/O=system:masters/CN=kwok-controller" "$client"
    # front-proxy CA: request-header authentication (aggregated APIs, delegated authn in kcm/scheduler)
    key front-proxy-ca
    openssl req -x509 -new -key front-proxy-ca.key -sha256 -days 3650 -subj "/CN=karpenter-azure-e2e-front-proxy-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out front-proxy-ca.crt 2>/dev/null
    key front-proxy-client
    openssl req -new -key front-proxy-client.key -subj "/CN=front-proxy-client" -out front-proxy-client.csr 2>/dev/null
    printf '%s\n' "$client" >front-proxy-client.ext
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
      -sha256 -days 365 -extfile front-proxy-client.ext -out front-proxy-client.crt 2>/dev/null
    rm -f front-proxy-client.csr front-proxy-client.ext
    key sa
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 644 ./*.crt sa.pub
  ) || die "PKI generation with openssl failed"
  for n in ca.crt apiserver.crt admin.crt kube-controller-manager.crt kube-scheduler.crt kwok.crt \
    front-proxy-ca.crt front-proxy-client.crt sa.pub; do
    [[ -s "$d/$n" ]] || die "PKI generation failed: $d/$n missing"
  done
}

write_kubeconfig() { # <file> <user> <pki dir>
  local f=$1 user=$2 d=$3
  b64() { base64 -w0 <"$1"; }
  cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: karpenter-azure-e2e
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(b64 "$d/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(b64 "$d/$user.crt")
    client-key-data: $(b64 "$d/$user.key")
contexts:
- name: karpenter-azure-e2e
  context:
    cluster: karpenter-azure-e2e
    user: $user
    namespace: default
current-context: karpenter-azure-e2e
EOF
  chmod 600 "$f"
}

launch() { # <dir> <component> <args...> : start in the background, record the pid
  local dir=$1 name=$2; shift 2
  "$BIN_DIR/$name" "$@" </dev/null >"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

wait_for() { # <dir> <component> <description> <command...> : poll until the command succeeds
  local dir=$1 name=$2 what=$3 deadline; shift 3
  deadline=$(($(date +%s) + START_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    # The pid is our own child, just launched: a check of its command line (as `recorded_pid`
    # does for pids of earlier runs) could see the forked shell before it execs the binary on a
    # busy machine and call a starting component dead.
    if ! running "$(cat "$dir/$name.pid")"; then
      tail -n 25 "$dir/logs/$name.log" >&2 || true
      die "$name exited while waiting for $what; see $dir/logs/$name.log"
    fi
    if (($(date +%s) >= deadline)); then
      tail -n 25 "$dir/logs/$name.log" >&2 || true
      die "timed out after ${START_TIMEOUT}s waiting for $what; see $dir/logs/$name.log"
    fi
    sleep 0.2
  done
}

terminate() { # <dir> <component...> : SIGTERM the recorded processes, wait, then SIGKILL leftovers
  local dir=$1 c pid pids=(); shift
  for c in "$@"; do
    if pid="$(recorded_pid "$dir" "$c")"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for _ in $(seq 1 100); do
    local left=()
    for pid in "${pids[@]}"; do running "$pid" && left+=("$pid"); done
    pids=("${left[@]}")
    ((${#pids[@]} == 0)) && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    log "pid $pid did not stop within 10s of SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  done
  for c in "$@"; do rm -f "$dir/$c.pid"; done
}

stop_dir() { # <dir>
  local dir=$1 pid
  # clients first, then the API server, then its storage
  terminate "$dir" kwok kube-scheduler kube-controller-manager
  terminate "$dir" kube-apiserver
  terminate "$dir" etcd
  if [[ -f "$dir/watchdog.pid" ]]; then
    pid="$(cat "$dir/watchdog.pid")"
    rm -f "$dir/watchdog.pid"
    # the watchdog is a copy of this script: only signal it if it is still ours and it is not us
    if [[ "$pid" =~ ^[0-9]+$ && "$pid" != "$$" ]] && running "$pid" &&
      [[ "$(cmdline "$pid")" == *"e2e-cluster.sh watchdog"* ]]; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  fi
}

cmd_stop() {
  local dir=${1:-}
  [[ -n "$dir" ]] || die "usage: $0 stop <dir>"
  [[ -d "$dir" ]] || { log "nothing to stop: $dir does not exist"; return 0; }
  dir="$(cd "$dir" && pwd)"
  stop_dir "$dir"
  log "stopped control plane in $dir"
}

# Internal: stop the cluster in <dir> once process <pid> is gone (see E2E_CLUSTER_WATCH_PID).
# Exits quietly if the cluster is stopped (or replaced by a new start) in the meantime.
cmd_watchdog() {
  local dir=$1 pid=$2 etcd_pid=$3
  # etcd is the one component `restart` never restarts, so its pid names the cluster.
  same_cluster() { [[ "$(cat "$dir/etcd.pid" 2>/dev/null)" == "$etcd_pid" ]]; }
  while running "$pid"; do
    same_cluster || exit 0
    sleep 1
  done
  same_cluster || exit 0
  log "process $pid is gone; stopping the control plane in $dir"
  rm -f "$dir/watchdog.pid"
  stop_dir "$dir"
}

cmd_start() {
  local dir=${1:-} t0 c
  [[ -n "$dir" ]] || die "usage: $0 start <dir>"
  t0=$(now)
  command -v openssl >/dev/null || die "openssl is required"
  command -v curl >/dev/null || die "curl is required"
  command -v python3 >/dev/null || die "python3 is required (free port selection)"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  for c in "${COMPONENTS[@]}"; do
    pid_alive "$dir" "$c" && die "a control plane is already running in $dir ($c); run: $0 stop $dir"
  done

  cmd_build >/dev/null
  local tb; tb=$(elapsed "$t0")

  # fresh state; only the paths this script owns are removed
  rm -rf "$dir/pki" "$dir/etcd-data" "$dir/logs" "$dir/kwok.yaml" "$dir/kubeconfig" "$dir/env" \
    "$dir"/*.kubeconfig "$dir"/*.pid "$dir/admin-token.csv"
  mkdir -p "$dir/logs" "$dir/etcd-data"
  chmod 700 "$dir/etcd-data"

  # if anything below fails, stop what was started
  trap 'rc=$?; if ((rc != 0)); then log "start failed; stopping what was started (logs: $dir/logs)"; stop_dir "$dir"; fi' EXIT

  local etcd_port etcd_peer_port api_port kcm_port sched_port kwok_port
  read -r etcd_port etcd_peer_port api_port kcm_port sched_port kwok_port <<<"$(free_ports 6)"
  APISERVER_URL="https://127.0.0.1:$api_port"

  gen_pki "$dir/pki"
  local P="$dir/pki" admin_token
  admin_token="$(openssl rand -hex 24)"
  printf '%s,kubernetes-admin-token,kubernetes-admin-token,"system:masters"\n' "$admin_token" >"$dir/admin-token.csv"
  chmod 600 "$dir/admin-token.csv"
  write_kubeconfig "$dir/kubeconfig" admin "$P"
  for c in kube-controller-manager kube-scheduler kwok; do write_kubeconfig "$dir/$c.kubeconfig" "$c" "$P"; done
  local f
  for f in "$CP_DIR"/kwok/stages/*.yaml; do cat "$f"; printf '\n---\n'; done >"$dir/kwok.yaml"

  launch "$dir" etcd --name=e2e --data-dir="$dir/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="e2e=http://127.0.0.1:$etcd_peer_port" --initial-cluster-state=new \
    --unsafe-no-fsync --quota-backend-bytes=2147483648 --auto-compaction-mode=periodic \
    --auto-compaction-retention=5m --log-level=warn
  wait_for "$dir" etcd "etcd health" curl -fsS "http://127.0.0.1:$etcd_port/health"

  # shellcheck disable=SC2086 # E2E_APISERVER_EXTRA_ARGS is a list of flags
  launch "$dir" kube-apiserver \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" --token-auth-file="$dir/admin-token.csv" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --requestheader-client-ca-file="$P/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
    --authorization-mode=Node,RBAC --allow-privileged=true \
    --enable-bootstrap-token-auth=true --enable-admission-plugins=NodeRestriction \
    --endpoint-reconciler-type=none --profiling=false ${E2E_APISERVER_EXTRA_ARGS:-}
  local ca=(--cacert "$P/ca.crt" -H "Authorization: Bearer $admin_token")
  wait_for "$dir" kube-apiserver "kube-apiserver /readyz" curl -fsS "${ca[@]}" "$APISERVER_URL/readyz"
  local ta; ta=$(elapsed "$t0")

  launch "$dir" kube-controller-manager \
    --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port="$kcm_port" \
    --controllers='*,bootstrapsigner,tokencleaner' --use-service-account-credentials=true \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
    --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --profiling=false
  launch "$dir" kube-scheduler \
    --kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port="$sched_port"
  # shellcheck disable=SC2086 # KWOK_MANAGE and KWOK_DISREGARD may each hold one flag with its value
  launch "$dir" kwok --kubeconfig="$dir/kwok.kubeconfig" --config="$dir/kwok.yaml" $KWOK_MANAGE $KWOK_DISREGARD \
    --cidr="$POD_CIDR" --node-ip=10.240.0.1 --node-lease-duration-seconds=40 \
    --server-address="127.0.0.1:$kwok_port"

  wait_for "$dir" kube-controller-manager "kube-controller-manager /healthz" \
    curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
  wait_for "$dir" kube-scheduler "kube-scheduler /healthz" curl -fsSk "https://127.0.0.1:$sched_port/healthz"
  wait_for "$dir" kwok "kwok /healthz" curl -fsS "http://127.0.0.1:$kwok_port/healthz"
  # the serviceaccount and token controllers must have run before pods can be created
  wait_for "$dir" kube-controller-manager "the default/default ServiceAccount" \
    curl -fsS "${ca[@]}" "$APISERVER_URL/api/v1/namespaces/default/serviceaccounts/default"
  wait_for "$dir" kube-controller-manager "the default/kube-root-ca.crt ConfigMap" \
    curl -fsS "${ca[@]}" "$APISERVER_URL/api/v1/namespaces/default/configmaps/kube-root-ca.crt"

  {
    printf '# karpenter-azure e2e control plane; written by hack/e2e-cluster.sh start\n'
    printf 'export %s=%q\n' \
      E2E_CLUSTER_DIR "$dir" \
      KUBECONFIG "$dir/kubeconfig" \
      APISERVER_URL "$APISERVER_URL" \
      APISERVER_CA_FILE "$P/ca.crt" \
      ADMIN_CERT_FILE "$P/admin.crt" \
      ADMIN_KEY_FILE "$P/admin.key" \
      ADMIN_TOKEN "$admin_token" \
      BIN_DIR "$BIN_DIR" \
      KUBERNETES_VERSION "$K8S_VERSION" \
      ETCD_URL "http://127.0.0.1:$etcd_port" \
      ETCD_PORT "$etcd_port" \
      APISERVER_PORT "$api_port" \
      KCM_PORT "$kcm_port" \
      SCHEDULER_PORT "$sched_port" \
      KWOK_PORT "$kwok_port" \
      SERVICE_CIDR "$SERVICE_CIDR" \
      POD_CIDR "$POD_CIDR" \
      ETCD_PID "$(cat "$dir/etcd.pid")" \
      KUBE_APISERVER_PID "$(cat "$dir/kube-apiserver.pid")" \
      KUBE_CONTROLLER_MANAGER_PID "$(cat "$dir/kube-controller-manager.pid")" \
      KUBE_SCHEDULER_PID "$(cat "$dir/kube-scheduler.pid")" \
      KWOK_PID "$(cat "$dir/kwok.pid")"
  } >"$dir/env.tmp"
  chmod 600 "$dir/env.tmp"
  mv "$dir/env.tmp" "$dir/env"

  if [[ -n "${E2E_CLUSTER_WATCH_PID:-}" ]]; then
    nohup "$HACK_DIR/e2e-cluster.sh" watchdog "$dir" "$E2E_CLUSTER_WATCH_PID" "$(cat "$dir/etcd.pid")" </dev/null \
      >>"$dir/logs/watchdog.log" 2>&1 &
    echo $! >"$dir/watchdog.pid"
  fi
  trap - EXIT
  log "control plane ready in $(elapsed "$t0")s (binaries ${tb}s, kube-apiserver ready at ${ta}s): $APISERVER_URL"
  log "  source $dir/env   # KUBECONFIG=$dir/kubeconfig"
}

# Stops <component> and starts it again with the command line it ran with, after <seconds> of outage.
# kube-apiserver is waited for until /readyz answers; the others until they run.
cmd_restart() {
  local dir=${1:-} name=${2:-} pause=${3:-0} pid args=()
  [[ -n "$dir" && -n "$name" ]] || die "usage: $0 restart <dir> <component> [seconds]"
  [[ "$name" != etcd ]] || die "etcd holds the cluster's identity (see the watchdog); it is not restarted"
  pid="$(recorded_pid "$dir" "$name")" || die "$name is not running in $dir"
  mapfile -d '' args <"/proc/$pid/cmdline"
  terminate "$dir" "$name"
  sleep "$pause"
  "${args[@]}" </dev/null >>"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  if [[ "$name" == kube-apiserver ]]; then
    # shellcheck disable=SC1091 # written by start
    source "$dir/env"
    wait_for "$dir" "$name" "kube-apiserver /readyz" \
      curl -fsS --cacert "$APISERVER_CA_FILE" -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/readyz"
  fi
  log "restarted $name in $dir after ${pause}s"
}

# Compacts etcd's key history up to the current revision (etcd's v3 JSON gateway).
cmd_compact() {
  local dir=${1:-} revision
  [[ -n "$dir" ]] || die "usage: $0 compact <dir>"
  # shellcheck disable=SC1091 # written by start
  source "$dir/env"
  revision="$(curl -fsS -X POST "$ETCD_URL/v3/kv/range" -d '{"key":"AA=="}' |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["header"]["revision"])')" ||
    die "reading etcd's revision at $ETCD_URL failed"
  curl -fsS -X POST "$ETCD_URL/v3/kv/compaction" -d "{\"revision\":\"$revision\",\"physical\":true}" >/dev/null ||
    die "compacting etcd at revision $revision failed"
  log "compacted etcd at revision $revision"
}

case "${1:-}" in
  build) cmd_build ;;
  restart) cmd_restart "${2:-}" "${3:-}" "${4:-0}" ;;
  compact) cmd_compact "${2:-}" ;;
  start) cmd_start "${2:-}" ;;
  stop) cmd_stop "${2:-}" ;;
  watchdog) cmd_watchdog "$2" "$3" "$4" ;;
  versions) printf 'kubernetes %s\netcd %s\nkwok %s\nhelm %s\nkey %s\nbin %s\n' \
    "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$HELM_VERSION" "$CACHE_KEY" "$BIN_DIR" ;;
  *) die "usage: $0 build | start <dir> | stop <dir> | versions" ;;
esac
