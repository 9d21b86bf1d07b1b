#!/usr/bin/env bash
# Installs everything the test suite needs, and is quick when everything is already there.
#
#   hack/deps.sh           install what is missing (rustup components and target, Debian packages,
#                          the e2e control plane); one line per dependency
#   hack/deps.sh --check   install nothing; list what is missing and exit 1 if anything is
#
# `make test` and `.ci/run` call it first. What it provides, and the test that needs it:
#   rustfmt, clippy                    `make lint`
#   targets x86_64- and aarch64-unknown-linux-musl
#                                      tests/container_image.rs (hack/image-build.sh: the Dockerfile's
#                                      static builds for amd64 and arm64)
#   ziglang, cargo-zigbuild (PyPI)     the same builds: Zig cross-compiles ring's C and links; the
#                                      versions the Dockerfile pins (read from it)
#   prometheus (prometheus, promtool)  tests/e2e/metrics.rs (promtool lints the page, Prometheus scrapes it)
#   chromium (headless browser)        tests/integration/timeline_report_browser.rs (renders the timeline's HTML report)
#   faketime (libfaketime)             tests/e2e/soak.rs (a controller replica whose wall clock is off)
#   jq                                 hack/configure-values.sh reads az's JSON with it (tests/e2e/configure_values.rs)
#   the control plane                  tests/e2e: hack/e2e-cluster.sh build (about 10 minutes cold)
#   upstream's bootstrap renderer      tests/oracle/bootstrap_oracle.rs: hack/aks-bootstrap.sh build (minutes cold)
#   upstream core's oracle helper      tests/oracle/requirements_oracle.rs and overlay_oracle.rs:
#                                      hack/upstream-oracle.sh build (3-7 minutes cold)
# Debian packages need root (sudo is used when not root) and `apt-get update` runs only when one is missing.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MUSL_TARGETS="x86_64-unknown-linux-musl aarch64-unknown-linux-musl"
CHECK_ONLY=false
case "${1:-}" in
  --check) CHECK_ONLY=true ;;
  "") ;;
  *) printf 'usage: hack/deps.sh [--check]\n' >&2; exit 2 ;;
esac

log() { printf '[deps] %s\n' "$*" >&2; }
missing=()

# step <name> <check command> <install function>: runs the install only when the check fails, then checks again.
step() {
  local name=$1 check=$2 install=$3 t0
  if eval "$check" >/dev/null 2>&1; then
    log "$name: present"
    return 0
  fi
  if $CHECK_ONLY; then
    log "$name: MISSING"
    missing+=("$name")
    return 0
  fi
  log "$name: installing ..."
  t0=$(date +%s)
  "$install"
  if ! eval "$check" >/dev/null 2>&1; then
    log "$name: still missing after the install; see the output above"
    exit 1
  fi
  log "$name: installed in $(($(date +%s) - t0))s"
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=false
apt_install() {
  if ! $APT_UPDATED; then
    as_root apt-get update -qq
    APT_UPDATED=true
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

install_rustfmt() { rustup component add rustfmt; }
install_clippy() { rustup component add clippy; }
install_musl_targets() {
  # shellcheck disable=SC2086 # two words
  rustup target add $MUSL_TARGETS
}
musl_targets_present() {
  local t
  for t in $MUSL_TARGETS; do rustup target list --installed | grep -qx "$t" || return 1; done
}
# The Dockerfile's `pip3 install ... ziglang==X cargo-zigbuild==Y` pins.
zig_pins() { sed -n 's/.*pip3 install .*\(ziglang==[^ ]*\) \(cargo-zigbuild==[^ ]*\).*/\1 \2/p' "$HACK_DIR/../Dockerfile"; }
install_zig_tools() {
  # shellcheck disable=SC2046 # two words
  python3 -m pip install --quiet $(zig_pins)
}
zig_tools_present() {
  local zig zigbuild
  read -r zig zigbuild <<<"$(zig_pins)"
  [ "$(python3 -m ziglang version 2>/dev/null)" = "${zig#ziglang==}" ] &&
    [ "$(cargo-zigbuild --version 2>/dev/null)" = "cargo-zigbuild ${zigbuild#cargo-zigbuild==}" ]
}
install_prometheus() {
  apt_install prometheus
  # The package starts its own server on :9090 where an init system runs; the e2e test starts one on a
  # free port, so the packaged one would only hold a port and memory.
  if [ -d /run/systemd/system ]; then
    as_root systemctl disable --now prometheus.service || true
  elif [ -x /etc/init.d/prometheus ] && as_root /etc/init.d/prometheus status >/dev/null 2>&1; then
    as_root /etc/init.d/prometheus stop || true
  fi
}
install_chromium() { apt_install chromium; }
install_faketime() { apt_install faketime; }
install_jq() { apt_install jq; }
install_controlplane() { "$HACK_DIR/e2e-cluster.sh" build >/dev/null; }
install_aks_bootstrap() { "$HACK_DIR/aks-bootstrap.sh" build >/dev/null; }
install_upstream_oracle() { "$HACK_DIR/upstream-oracle.sh" build >/dev/null; }

controlplane_built() {
  local bin
  bin="$("$HACK_DIR/e2e-cluster.sh" versions | sed -n 's/^bin //p')"
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm; do
    [ -x "$bin/$b" ] || return 1
  done
}

step "rustfmt" "cargo fmt --version" install_rustfmt
step "clippy" "cargo clippy --version" install_clippy
step "rust targets $MUSL_TARGETS" musl_targets_present install_musl_targets
step "ziglang and cargo-zigbuild ($(zig_pins))" zig_tools_present install_zig_tools
step "prometheus and promtool" "command -v prometheus && command -v promtool" install_prometheus
step "chromium (headless browser)" "command -v chromium" install_chromium
step "faketime (libfaketime)" "ls /usr/lib/*/faketime/libfaketime.so.1" install_faketime
step "jq" "command -v jq" install_jq
step "e2e control plane" controlplane_built install_controlplane
step "upstream bootstrap renderer (hack/aks-bootstrap.sh)" "\"$HACK_DIR/aks-bootstrap.sh\" path" install_aks_bootstrap
step "upstream core oracle (hack/upstream-oracle.sh)" "\"$HACK_DIR/upstream-oracle.sh\" path" install_upstream_oracle

if [ "${#missing[@]}" -gt 0 ]; then
  log "missing: ${missing[*]}; run hack/deps.sh to install them"
  exit 1
fi
