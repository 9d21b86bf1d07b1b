#!/usr/bin/env bash
# Upstream Karpenter's disruption (consolidation) decision on clusters built from upstream's scheduling
# benchmark pods, written out for `karpenter-azure bench-upstream-disruption`, so both disruption
# decisions can be compared on the same cluster.
#
#   hack/upstream-disruption.sh build                       build (or reuse) the cached test binary
#   hack/upstream-disruption.sh run <outdir> [sizes...]     for each size N (nodes; default 100 500) and
#                                                           shape write <outdir>/<N>/<shape>/{nodes.yaml,
#                                                           nodeclaims.yaml,pods.yaml,nodepool.yaml,
#                                                           catalog.json,upstream.json}
#   hack/upstream-disruption.sh versions                    print the pinned version, the cache key and the binary
#
# UPSTREAM_DISRUPTION_SHAPES (default "uniform zone-drained fragmented spot-mixed"),
# UPSTREAM_DISRUPTION_POLICIES (default "WhenEmptyOrUnderutilized,Balanced") and
# UPSTREAM_DISRUPTION_REMOVE (fraction of pods removed, default 0.5) choose the runs.
#
# The version is pinned by hack/upstream-bench/go.mod (+ go.sum), shared with hack/upstream-bench.sh.
# Our Go source is hack/upstream-bench/zz_disruption_test.go plus zz_dump_test.go (its file writers),
# added to upstream's scheduling test package with `go test -overlay` (that package holds the benchmark's
# pod generator). Runs need an API server: envtest's kube-apiserver and etcd, taken from
# KUBEBUILDER_ASSETS or else from the control plane hack/e2e-cluster.sh builds. The binary is cached in
#   ${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/upstream-disruption/<key>/scheduling.test
# See hack/upstream-bench/README.md.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
UB_DIR="$HACK_DIR/upstream-bench"
LOG_PREFIX=upstream-disruption
# shellcheck source=hack/lib.sh
source "$HACK_DIR/lib.sh"

MODULE=sigs.k8s.io/karpenter
PKG_DIR=pkg/controllers/provisioning/scheduling
OVERLAY_FILES=(zz_dump_test.go zz_disruption_test.go)
# test_performance: upstream's benchmark file (makeDiversePods); the other two: our files.
TAGS=test_performance,upstream_bench_dump,upstream_disruption_bench
SHAPES_DEFAULT="uniform zone-drained fragmented spot-mixed"

VERSION="$(pinned_version "$UB_DIR/go.mod" "$MODULE")"
CACHE_KEY="karpenter-${VERSION}_$(content_hash "${OVERLAY_FILES[@]/#/$UB_DIR/}" "$UB_DIR/go.mod" "$UB_DIR/go.sum")"
KEY_DIR="$(cache_dir upstream-disruption)/$CACHE_KEY"
BIN="$KEY_DIR/scheduling.test"

cmd_build() { locked_build "$KEY_DIR" "$BIN" build_binary; }

BUILD_NICE="${UPSTREAM_BENCH_BUILD_NICE:-10}"
build_binary() {
  go_test_build_with_overlay "$UB_DIR" "$KEY_DIR" "$BIN" "$MODULE" "$VERSION" "$PKG_DIR" "$TAGS" "${OVERLAY_FILES[@]}"
}

# The API server envtest starts: KUBEBUILDER_ASSETS, else the e2e control plane's binaries.
assets_dir() {
  local dir="${KUBEBUILDER_ASSETS:-}"
  if [[ -z "$dir" ]]; then
    dir="$("$HACK_DIR/e2e-cluster.sh" versions | sed -n 's/^bin //p')"
  fi
  [[ -x "$dir/kube-apiserver" && -x "$dir/etcd" ]] ||
    die "no kube-apiserver and etcd in $dir: run hack/e2e-cluster.sh build or set KUBEBUILDER_ASSETS"
  printf '%s\n' "$dir"
}

cmd_run() {
  local out="${1:-}" n shape dir summary assets
  [[ -n "$out" ]] || die "usage: $0 run <outdir> [sizes...]"
  shift
  local sizes=("$@")
  ((${#sizes[@]})) || sizes=(100 500)
  for n in "${sizes[@]}"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "node count $n: want a positive integer"
  done
  read -r -a shapes <<<"${UPSTREAM_DISRUPTION_SHAPES:-$SHAPES_DEFAULT}"
  assets="$(assets_dir)"
  cmd_build >/dev/null
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
  for n in "${sizes[@]}"; do
    for shape in "${shapes[@]}"; do
      dir="$out/$n/$shape"
      mkdir -p "$dir"
      rm -f "$dir/upstream.json"
      log "$n nodes, $shape: packing with upstream's provisioner and running its disruption pass ..."
      # One process per size and shape: the peak RSS is that run's. Not nice'd: it is timed.
      (
        cd "$dir"
        KUBEBUILDER_ASSETS="$assets" UPSTREAM_DISRUPTION_OUT="$dir" UPSTREAM_DISRUPTION_NODES="$n" \
          UPSTREAM_DISRUPTION_SHAPE="$shape" "$BIN" -test.run '^TestDumpUpstreamDisruption$' -test.count=1 \
          -test.timeout=0 -test.v
      ) >"$dir/upstream.log" 2>&1 || die "upstream run for $n nodes, $shape failed; see $dir/upstream.log"
      summary="$(sed -n 's/^SUMMARY //p' "$dir/upstream.log")"
      [[ -n "$summary" ]] || die "no summary in $dir/upstream.log"
      printf '%s\n' "$summary"
    done
  done
}

case "${1:-}" in
  build) cmd_build ;;
  run) shift; cmd_run "$@" ;;
  versions) printf '%s %s\nkey %s\nbin %s\n' "$MODULE" "$VERSION" "$CACHE_KEY" "$BIN" ;;
  *) die "usage: $0 build | run <outdir> [sizes...] | versions" ;;
esac
