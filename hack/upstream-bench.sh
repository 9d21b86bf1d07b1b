#!/usr/bin/env bash
# Upstream Karpenter's own scheduling benchmark (BenchmarkScheduling<N>), run by upstream's scheduler and
# written out for `karpenter-azure simulate`, so both solvers can be compared on the same input.
#
#   hack/upstream-bench.sh build                    build (or reuse) the cached test binary; prints its path
#   hack/upstream-bench.sh run <outdir> [sizes...]  for each pod count N (default 1000 5000 20000) write
#                                                   <outdir>/<N>/{pods.yaml,nodepool.yaml,catalog.json,upstream.json}
#   hack/upstream-bench.sh input <outdir> [sizes...] the same input files without running upstream's
#                                                   scheduler (no upstream.json): for timing our solver alone
#   hack/upstream-bench.sh versions                 print the pinned version, the cache key and the binary
#
# UPSTREAM_BENCH_SEED=<n> draws the pods with another seed than the benchmark's 42 (run, input).
#
# The version is pinned by hack/upstream-bench/go.mod (+ go.sum). The only Go source of ours is
# hack/upstream-bench/zz_dump_test.go, added to upstream's scheduling test package at build time with
# `go test -overlay`. The binary is cached outside the repository in
#   ${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/upstream-bench/<key>/scheduling.test
# See hack/upstream-bench/README.md.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
UB_DIR="$HACK_DIR/upstream-bench"
LOG_PREFIX=upstream-bench
# shellcheck source=hack/lib.sh
source "$HACK_DIR/lib.sh"

MODULE=sigs.k8s.io/karpenter
PKG_DIR=pkg/controllers/provisioning/scheduling
OVERLAY_FILE=zz_dump_test.go
# test_performance: upstream's benchmark file (the helpers we call); upstream_bench_dump: our file.
TAGS=test_performance,upstream_bench_dump

VERSION="$(pinned_version "$UB_DIR/go.mod" "$MODULE")"
# The key changes with the pinned version, our overlay file and the pinned dependency graph.
CACHE_KEY="karpenter-${VERSION}_$(content_hash "$UB_DIR/$OVERLAY_FILE" "$UB_DIR/go.mod" "$UB_DIR/go.sum")"
KEY_DIR="$(cache_dir upstream-bench)/$CACHE_KEY"
BIN="$KEY_DIR/scheduling.test"

# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------
cmd_build() { locked_build "$KEY_DIR" "$BIN" build_binary; }

BUILD_NICE="${UPSTREAM_BENCH_BUILD_NICE:-10}"
build_binary() {
  go_test_build_with_overlay "$UB_DIR" "$KEY_DIR" "$BIN" "$MODULE" "$VERSION" "$PKG_DIR" "$TAGS" "$OVERLAY_FILE"
}

# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------
cmd_run() {
  local input_only=$1 out="${2:-}" n dir summary
  [[ -n "$out" ]] || die "usage: $0 run|input <outdir> [sizes...]"
  shift 2
  local sizes=("$@")
  ((${#sizes[@]})) || sizes=(1000 5000 20000)
  for n in "${sizes[@]}"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "pod count $n: want a positive integer"
  done
  cmd_build >/dev/null
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
  for n in "${sizes[@]}"; do
    dir="$out/$n"
    mkdir -p "$dir"
    if [[ "$input_only" == 1 ]]; then
      log "$n pods: generating the input (upstream's scheduler not run) ..."
      rm -f "$dir/upstream.json"
    else
      log "$n pods: generating and solving with upstream's scheduler (20,000 pods take minutes) ..."
    fi
    # One process per size: the peak RSS (VmHWM) is then that size's. Not nice'd: it is timed.
    (
      cd "$dir"
      UPSTREAM_BENCH_OUT="$dir" UPSTREAM_BENCH_PODS="$n" UPSTREAM_BENCH_REPEAT="${UPSTREAM_BENCH_REPEAT:-0}" \
        UPSTREAM_BENCH_INPUT_ONLY="$input_only" "$BIN" -test.run '^TestDumpUpstreamBenchmark$' -test.count=1 -test.timeout=0 -test.v
    ) >"$dir/upstream.log" 2>&1 || die "upstream run for $n pods failed; see $dir/upstream.log"
    summary="$(sed -n 's/^SUMMARY //p' "$dir/upstream.log")"
    [[ -n "$summary" ]] || die "no summary in $dir/upstream.log"
    printf '%s -> %s\n' "$summary" "$dir"
  done
}

case "${1:-}" in
  build) cmd_build ;;
  run) shift; cmd_run 0 "$@" ;;
  input) shift; cmd_run 1 "$@" ;;
  versions) printf '%s %s\nkey %s\nbin %s\n' "$MODULE" "$VERSION" "$CACHE_KEY" "$BIN" ;;
  *) die "usage: $0 build | run <outdir> [sizes...] | input <outdir> [sizes...] | versions" ;;
esac
