#!/usr/bin/env bash
# Upstream's node custom data, rendered by upstream's own generator (the Azure provider's
# pkg/providers/imagefamily/bootstrap, aksscriptless mode), for tests/bootstrap_oracle.rs.
#
#   hack/aks-bootstrap.sh build            build (or reuse) the cached helper; prints its path
#   hack/aks-bootstrap.sh path             print the helper's path if it is built, else exit 1
#   hack/aks-bootstrap.sh render < cases   cases: JSON array on stdin; prints {name: decoded script}
#   hack/aks-bootstrap.sh versions         print the pinned version, the cache key and the binary
#
# Pinned by hack/aks-bootstrap/go.mod (+ go.sum); the only Go source is hack/aks-bootstrap/main.go.
# The binary is cached outside the repository in
#   ${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/aks-bootstrap/<key>/aks-bootstrap
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC_DIR="$HACK_DIR/aks-bootstrap"
MODULE=github.com/Azure/karpenter-provider-azure

log() { printf '[aks-bootstrap] %s\n' "$*" >&2; }
die() { printf '[aks-bootstrap] ERROR: %s\n' "$*" >&2; exit 1; }

VERSION="$(awk -v m="$MODULE" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' \
  "$SRC_DIR/go.mod")"
[[ -n "$VERSION" ]] || die "cannot find $MODULE in $SRC_DIR/go.mod"
HASH="$(cat "$SRC_DIR/main.go" "$SRC_DIR/go.mod" "$SRC_DIR/go.sum" | sha256sum | cut -c1-12)"
CACHE_KEY="karpenter-provider-azure-${VERSION}_${HASH}"
KEY_DIR="${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/aks-bootstrap/$CACHE_KEY"
BIN="$KEY_DIR/aks-bootstrap"

cmd_build() {
  if [[ ! -x "$BIN" ]]; then
    command -v go >/dev/null || die "go is required to build the helper (hack/deps.sh installs it)"
    mkdir -p "$KEY_DIR"
    exec 9>"$KEY_DIR/.build.lock"
    flock 9
    if [[ ! -x "$BIN" ]]; then
      local t0
      t0=$(date +%s)
      log "building the helper against $MODULE@$VERSION (the first build downloads modules; minutes) ..."
      (cd "$SRC_DIR" && nice -n "${AKS_BOOTSTRAP_BUILD_NICE:-10}" go build -mod=readonly -trimpath \
        -o "$KEY_DIR/.aks-bootstrap.tmp" .) >"$KEY_DIR/build.log" 2>&1 ||
        die "go build failed; see $KEY_DIR/build.log"
      mv -f "$KEY_DIR/.aks-bootstrap.tmp" "$BIN"
      log "built $BIN in $(($(date +%s) - t0))s"
    fi
    flock -u 9
  fi
  printf '%s\n' "$BIN"
}

case "${1:-}" in
  build) cmd_build ;;
  path) [[ -x "$BIN" ]] && printf '%s\n' "$BIN" ;;
  render) "$(cmd_build)" ;;
  versions) printf '%s %s\nkey %s\nbin %s\n' "$MODULE" "$VERSION" "$CACHE_KEY" "$BIN" ;;
  *) die "usage: $0 build | path | render < cases.json | versions" ;;
esac
