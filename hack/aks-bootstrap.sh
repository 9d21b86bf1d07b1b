#!/usr/bin/env bash
# Upstream's node custom data, rendered by upstream's own generator (the Azure provider's
# pkg/providers/imagefamily/bootstrap, aksscriptless mode), for tests/oracle/bootstrap_oracle.rs.
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
LOG_PREFIX=aks-bootstrap
# shellcheck source=hack/lib.sh
source "$HACK_DIR/lib.sh"

VERSION="$(pinned_version "$SRC_DIR/go.mod" "$MODULE")"
CACHE_KEY="karpenter-provider-azure-${VERSION}_$(content_hash "$SRC_DIR/main.go" "$SRC_DIR/go.mod" "$SRC_DIR/go.sum")"
KEY_DIR="$(cache_dir aks-bootstrap)/$CACHE_KEY"
BIN="$KEY_DIR/aks-bootstrap"

BUILD_NICE="${AKS_BOOTSTRAP_BUILD_NICE:-10}"
build_binary() { go_build_helper "$SRC_DIR" "$KEY_DIR" "$BIN" "$MODULE@$VERSION"; }

cmd_build() { locked_build "$KEY_DIR" "$BIN" build_binary; }

case "${1:-}" in
  build) cmd_build ;;
  path) [[ -x "$BIN" ]] && printf '%s\n' "$BIN" ;;
  render) "$(cmd_build)" ;;
  versions) printf '%s %s\nkey %s\nbin %s\n' "$MODULE" "$VERSION" "$CACHE_KEY" "$BIN" ;;
  *) die "usage: $0 build | path | render < cases.json | versions" ;;
esac
