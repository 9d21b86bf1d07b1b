#!/usr/bin/env bash
# Every check of the project, in stages; `make test` runs it. A failing stage does not stop the
# others: every stage runs, the summary at the end lists each stage's time and result, and the exit
# status is 1 when any failed.
#
# Stages:
#   deps         hack/deps.sh: installs what the tests need (quick when present)
#   lint         rustfmt and clippy with warnings denied
#   build        the debug test binaries: the unit tests of the core crate (crates/core) and of the
#                main crate, and tests/integration, tests/e2e and tests/oracle
#   build-bins   the controller and fake-arm binaries `make playground` runs (tests/e2e/playground.rs)
#   image-build  started in the background after `deps`: hack/image-build.sh amd64, then arm64 (the
#                Dockerfile's release builds; cold, each is about 14 minutes of CPU for the dependency
#                layer, then the cached layer is restored), at the lowest CPU priority so it takes only
#                the CPU the other stages leave idle; the image test waits for it
#   test         every test binary (`--no-fail-fast`), the e2e suite among them, except the image test
#   soak         the chaos soak (tests/e2e/soak.rs) for SOAK_MINUTES (default 5) on a control plane of
#                its own, after the other tests so that nothing else shares the machine with it
#   doc          doc tests
#   image        tests/container_image.rs: both builds again (restored from their layers), the amd64
#                binary in an empty root, and one amd64 build after a one-line change (the project layer)
#
# The stage table is also written to $CARGO_TARGET_DIR/test-stages.txt (target/ when unset).
set -uo pipefail
cd "$(dirname "$0")/.."

CARGO="${CARGO:-cargo}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
mkdir -p "$TARGET_DIR"
STAGES_FILE="$TARGET_DIR/test-stages.txt"
: >"$STAGES_FILE"
failed=()

log() { printf '[test] %s\n' "$*" >&2; }

# stage <name> <command...>: runs the command, records its time and result.
stage() {
  local name=$1 t0 status
  shift
  log "stage $name: $*"
  t0=$(date +%s)
  "$@"
  status=$?
  record "$name" "$t0" "$status"
  return 0
}

record() { # <name> <start time> <exit status>
  local result=ok
  if [ "$3" -ne 0 ]; then result="FAILED (exit $3)"; failed+=("$1"); fi
  printf '%-12s %5ss  %s\n' "$1" "$(($(date +%s) - $2))" "$result" >>"$STAGES_FILE"
  log "stage $1: $result"
}

lint() {
  "$CARGO" fmt --all -- --check &&
    # --all-targets leaves out test targets with `test = false` (the image test); name it too.
    "$CARGO" clippy --workspace --all-targets --test container_image -- -D warnings
}

stage deps hack/deps.sh

IMAGE_LOG="$TARGET_DIR/image-build.log"
image_t0=$(date +%s)
(IMAGE_BUILD_NICE=19 hack/image-build.sh amd64 && IMAGE_BUILD_NICE=19 hack/image-build.sh arm64) >"$IMAGE_LOG" 2>&1 &
image_pid=$!
log "stage image-build: started in the background (log: $IMAGE_LOG)"

stage lint lint
# --tests: every crate's unit tests and the test binaries (integration, e2e, oracle); the binary and
# the fakes' crate have none (`test = false`), and the image test waits for its build below.
stage build "$CARGO" test --workspace --tests --no-run
# The binaries `make playground` runs; its e2e test (tests/e2e/playground.rs) runs inside `cargo test`,
# which holds the build lock, so they are built here.
stage build-bins "$CARGO" build -p karpenter-azure -p fake-azure --bins
stage test "$CARGO" test --workspace --tests --no-fail-fast
stage soak env SOAK_MINUTES="${SOAK_MINUTES:-5}" "$CARGO" test --test e2e soak -- --ignored --nocapture
stage doc "$CARGO" test --workspace --doc

log "waiting for the image build ..."
wait "$image_pid"
image_status=$?
if [ "$image_status" -ne 0 ]; then tail -n 30 "$IMAGE_LOG" >&2; fi
record image-build "$image_t0" "$image_status"
stage image "$CARGO" test --test container_image

printf '\nstage        time  result\n' >&2
cat "$STAGES_FILE" >&2
if [ "${#failed[@]}" -gt 0 ]; then
  log "failed stages: ${failed[*]}"
  exit 1
fi
log "all stages passed"
