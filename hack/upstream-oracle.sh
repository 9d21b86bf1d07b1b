#!/usr/bin/env bash
# Upstream Karpenter core's requirements algebra and NodeOverlay application, run as an oracle for
# tests/oracle/requirements_oracle.rs and tests/oracle/overlay_oracle.rs.
#
#   hack/upstream-oracle.sh build                      build (or reuse) the cached helper; prints its path
#   hack/upstream-oracle.sh path                       print the helper's path if it is built, else exit 1
#   hack/upstream-oracle.sh requirements < input.json  upstream's answers for requirement cases
#   hack/upstream-oracle.sh overlays < input.json      upstream's answers for NodeOverlay cases
#   hack/upstream-oracle.sh versions                   print the pinned version, the cache key and the binary
#
# Pinned by hack/upstream-oracle/go.mod (+ go.sum); the only Go source is hack/upstream-oracle/main.go.
# The binary is cached outside the repository in
#   ${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/upstream-oracle/<key>/upstream-oracle
# See hack/upstream-oracle/README.md.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC_DIR="$HACK_DIR/upstream-oracle"
MODULE=sigs.k8s.io/karpenter
LOG_PREFIX=upstream-oracle
# shellcheck source=hack/lib.sh
source "$HACK_DIR/lib.sh"

VERSION="$(pinned_version "$SRC_DIR/go.mod" "$MODULE")"
CACHE_KEY="karpenter-${VERSION}_$(content_hash "$SRC_DIR/main.go" "$SRC_DIR/go.mod" "$SRC_DIR/go.sum")"
KEY_DIR="$(cache_dir upstream-oracle)/$CACHE_KEY"
BIN="$KEY_DIR/upstream-oracle"

BUILD_NICE="${UPSTREAM_ORACLE_BUILD_NICE:-10}"
build_binary() { go_build_helper "$SRC_DIR" "$KEY_DIR" "$BIN" "$MODULE@$VERSION"; }

cmd_build() { locked_build "$KEY_DIR" "$BIN" build_binary; }

case "${1:-}" in
  build) cmd_build ;;
  path) [[ -x "$BIN" ]] && printf '%s\n' "$BIN" ;;
  requirements | overlays) exec "$(cmd_build)" "$1" ;;
  versions) printf '%s %s\nkey %s\nbin %s\n' "$MODULE" "$VERSION" "$CACHE_KEY" "$BIN" ;;
  *) die "usage: $0 build | path | requirements < input.json | overlays < input.json | versions" ;;
esac
