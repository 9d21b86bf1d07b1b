#!/usr/bin/env bash
# The Rust steps of the image build: the Dockerfile's build stage runs them, and so does
# hack/image-build.sh (the same steps without a container engine). TARGETARCH (amd64 or arm64, as
# BuildKit sets it) chooses the musl target; cargo-zigbuild cross-compiles with Zig as C compiler and
# linker, so either architecture builds on either machine.
#
#   hack/image-cargo.sh stubs          write a stub for each target the workspace manifests name, so the
#                                      dependency layer builds from the manifests alone
#   hack/image-cargo.sh deps           build the controller's dependencies, then drop what was built of the
#                                      workspace's own crates (from stubs: cargo would take it as fresh
#                                      when the real sources are older than it)
#   hack/image-cargo.sh build          build the controller (release, --locked)
#   hack/image-cargo.sh install DEST   copy the built binary to DEST
set -euo pipefail

case "${TARGETARCH:-}" in
  amd64) TRIPLE=x86_64-unknown-linux-musl ;;
  arm64) TRIPLE=aarch64-unknown-linux-musl ;;
  *) printf 'hack/image-cargo.sh: TARGETARCH must be amd64 or arm64 (got "%s")\n' "${TARGETARCH:-}" >&2; exit 2 ;;
esac
BUILD=(cargo zigbuild --release --locked --target "$TRIPLE" --bin karpenter-azure)
# The workspace's own packages (Cargo.toml [workspace] members).
OWN_PACKAGES=(-p karpenter-azure -p karpenter-azure-core -p fake-azure)

# Every target path the manifests name or cargo discovers: binaries get a `main`, the rest stay empty.
STUB_BINARIES=(src/main.rs crates/fake-azure/src/bin/fake-arm.rs)
STUB_LIBRARIES=(src/lib.rs crates/core/src/lib.rs crates/fake-azure/src/lib.rs tests/container_image.rs)

stub() { # <file> <content>: only where no real source was copied
  [[ -e "$1" ]] && return 0
  mkdir -p "$(dirname "$1")"
  printf '%s' "$2" >"$1"
}

case "${1:-}" in
  stubs)
    for f in "${STUB_BINARIES[@]}"; do stub "$f" $'fn main() {}\n'; done
    for f in "${STUB_LIBRARIES[@]}"; do stub "$f" ''; done
    ;;
  deps)
    "${BUILD[@]}"
    cargo clean --release --target "$TRIPLE" "${OWN_PACKAGES[@]}"
    ;;
  build) "${BUILD[@]}" ;;
  install)
    [[ -n "${2:-}" ]] || { printf 'usage: hack/image-cargo.sh install DEST\n' >&2; exit 2; }
    mkdir -p "$(dirname "$2")"
    cp "target/$TRIPLE/release/karpenter-azure" "$2"
    ;;
  *) printf 'usage: hack/image-cargo.sh stubs | deps | build | install DEST\n' >&2; exit 2 ;;
esac
