#!/usr/bin/env bash
# The Dockerfile's build, without a container engine, for one architecture: the steps of its build stage
# in order, with BuildKit's layer caching for the two Rust layers. tests/container_image.rs and
# hack/test.sh run it; nothing here is specific to a test.
#
#   hack/image-build.sh ARCH [--one-line-change]
#
# ARCH is amd64 or arm64 (BuildKit's TARGETARCH). The build stage's first steps install the toolchain
# (Debian's python3-pip, the pinned ziglang and cargo-zigbuild from PyPI, the rustup targets); here
# hack/deps.sh installs the same pins and this script checks them. Then, from `WORKDIR /src`:
#   layer 1   the COPY and RUN steps before `COPY . .`: the manifests, stub sources and the dependency
#             build. Its key is the hash of those steps, the files they copy, ARCH and the toolchain
#             versions; a build with the same key restores the stored layer (CACHED) instead of building.
#   layer 2   `COPY . .` (the files git lists, less .dockerignore's) and the steps after it, on a copy of
#             layer 1 at the same path, as BuildKit runs it. With the same key and the same files it is
#             CACHED too.
# --one-line-change appends a comment line to src/lib.rs in layer 2's copy of the sources (never in the
# checkout): the build a developer gets after a one-line edit, which must reuse layer 1.
#
# Output, under ${IMAGE_BUILD_DIR:-<cargo target dir>/image}/ARCH: karpenter-azure (the image's binary,
# the final stage's COPY --from=build; not replaced by a --one-line-change build), and on stdout the line
#   image-build ARCH: layer 1 CACHED|built in Ns, layer 2 CACHED|built in Ns, binary <path>
# whose path is this build's own copy (the three newest builds' copies are kept).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[image-build] %s\n' "$*" >&2; }
die() { printf '[image-build] ERROR: %s\n' "$*" >&2; exit 1; }

ARCH="${1:-}"
ONE_LINE_CHANGE=false
# The changed line differs on every run, as an edit would: the project layer is never restored for it.
CHANGE_LINE="// a one-line change (hack/image-build.sh --one-line-change) at $(date +%s%N)"
case "${2:-}" in
  --one-line-change) ONE_LINE_CHANGE=true ;;
  "") ;;
  *) die "usage: hack/image-build.sh amd64|arm64 [--one-line-change]" ;;
esac
[[ "$ARCH" == amd64 || "$ARCH" == arm64 ]] || die "usage: hack/image-build.sh amd64|arm64 [--one-line-change]"

if [[ -n "${IMAGE_BUILD_DIR:-}" ]]; then
  BASE="$IMAGE_BUILD_DIR"
else
  BASE="${CARGO_TARGET_DIR:-$REPO/target}/image"
fi
DIR="$BASE/$ARCH"
WORK="$DIR/work"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9

DOCKERFILE="$REPO/Dockerfile"
# The build stage: from its FROM to the next FROM.
mapfile -t STAGE < <(awk '/^FROM /{n++} n==1 && !/^FROM / && !/^[[:space:]]*(#|$)/' "$DOCKERFILE")

# ---------------------------------------------------------------------------------------------
# the toolchain steps: the pins the Dockerfile installs must be what this machine has
# ---------------------------------------------------------------------------------------------
pin() { # <package>: the version the Dockerfile's pip line pins
  sed -n "s/.*[[:space:]]$1==\([^[:space:]]*\).*/\1/p" "$DOCKERFILE" | head -n 1
}
want_zig="$(pin ziglang)"
want_zigbuild="$(pin cargo-zigbuild)"
[[ -n "$want_zig" && -n "$want_zigbuild" ]] || die "the Dockerfile pins no ziglang==/cargo-zigbuild== version"
have_zig="$(python3 -m ziglang version 2>/dev/null || true)"
have_zigbuild="$(cargo-zigbuild --version 2>/dev/null | awk '{print $2}' || true)"
[[ "$have_zig" == "$want_zig" ]] ||
  die "the Dockerfile pins ziglang $want_zig, this machine has '${have_zig:-none}'; run hack/deps.sh"
[[ "$have_zigbuild" == "$want_zigbuild" ]] ||
  die "the Dockerfile pins cargo-zigbuild $want_zigbuild, this machine has '${have_zigbuild:-none}'; run hack/deps.sh"
for triple in $(sed -n 's/^RUN rustup target add //p' "$DOCKERFILE"); do
  rustup target list --installed | grep -qx "$triple" || die "rust target $triple is missing; run hack/deps.sh"
done
TOOLCHAIN="$(rustc -V) zig $have_zig cargo-zigbuild $have_zigbuild"

# ---------------------------------------------------------------------------------------------
# the steps from WORKDIR /src
# ---------------------------------------------------------------------------------------------
LAYER1=() LAYER2=() seen_workdir=false in_layer2=false
for line in "${STAGE[@]}"; do
  if [[ "$line" == "WORKDIR /src" ]]; then seen_workdir=true; continue; fi
  $seen_workdir || continue
  case "$line" in
    "COPY . .") in_layer2=true; LAYER2+=("$line") ;;
    COPY\ * | RUN\ *) if $in_layer2; then LAYER2+=("$line"); else LAYER1+=("$line"); fi ;;
    ARG\ * | ENV\ *) die "unexpected step after WORKDIR: $line (hack/image-build.sh runs COPY and RUN)" ;;
  esac
done
$seen_workdir && $in_layer2 || die "the Dockerfile's build stage needs WORKDIR /src and then COPY . ."

# The files of the build context: what git lists (tracked and new, not ignored), less .dockerignore's.
context_files() {
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard) | python3 -c '
import fnmatch, sys
ignore = [l.strip().rstrip("/") for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
for path in sys.stdin.buffer.read().decode().split("\0"):
    parts = path.split("/")
    if path and not any(fnmatch.fnmatch("/".join(parts[:i]), p) for p in ignore for i in range(1, len(parts) + 1)):
        sys.stdout.write(path + "\0")
' "$REPO/.dockerignore"
}

copy_step() { # <"COPY src... dest">: into $WORK/src, as COPY does (a trailing / is a directory)
  local -a words
  read -r -a words <<<"${1#COPY }"
  local dest="${words[-1]}"
  unset 'words[-1]'
  mkdir -p "$WORK/src/$dest"
  (cd "$REPO" && cp -p "${words[@]}" "$WORK/src/$dest")
}

run_step() { # <"RUN command">: in $WORK/src with the build stage's environment
  env -i PATH="$PATH" HOME="$HOME" ${CARGO_HOME:+CARGO_HOME="$CARGO_HOME"} ${RUSTUP_HOME:+RUSTUP_HOME="$RUSTUP_HOME"} \
    ${RUSTUP_TOOLCHAIN:+RUSTUP_TOOLCHAIN="$RUSTUP_TOOLCHAIN"} ${TMPDIR:+TMPDIR="$TMPDIR"} \
    TARGETARCH="$ARCH" nice -n "${IMAGE_BUILD_NICE:-0}" bash -c "cd \"\$1\" && ${1#RUN }" bash "$WORK/src"
}

hash_of() { sha256sum | cut -c1-16; }

# Layer 1's key: its steps, the files its COPY steps name, the architecture and the toolchain.
layer1_key="$({
  printf '%s\n' "$ARCH" "$TOOLCHAIN" "${LAYER1[@]}"
  for step in "${LAYER1[@]}"; do
    if [[ "$step" == COPY\ * ]]; then
      read -r -a words <<<"${step#COPY }"
      unset 'words[-1]'
      (cd "$REPO" && sha256sum "${words[@]}")
    fi
  done
} | hash_of)"
layer2_key="$({
  printf '%s\n' "$layer1_key" "${LAYER2[@]}"
  if $ONE_LINE_CHANGE; then printf '%s\n' "$CHANGE_LINE"; fi
  context_files | (cd "$REPO" && xargs -0 sha256sum)
} | hash_of)"

t0=$(date +%s)
layer1="CACHED"
if [[ -d "$DIR/layer1-$layer1_key" ]]; then
  log "layer 1 (dependencies) $layer1_key: CACHED"
else
  log "layer 1 (dependencies) $layer1_key: building ..."
  rm -rf "$WORK"
  mkdir -p "$WORK/src"
  for step in "${LAYER1[@]}"; do
    log "  $step"
    if [[ "$step" == COPY\ * ]]; then copy_step "$step"; else run_step "$step"; fi
  done
  rm -rf "$DIR"/layer1-*
  cp -a --reflink=auto "$WORK" "$DIR/layer1-$layer1_key"
  layer1="built in $(($(date +%s) - t0))s"
fi

t1=$(date +%s)
layer2="CACHED"
if [[ -f "$DIR/layer2-$layer2_key/karpenter-azure" ]]; then
  log "layer 2 (project) $layer2_key: CACHED"
else
  log "layer 2 (project) $layer2_key: building on layer 1 ..."
  # On a copy of layer 1 at the same path, as BuildKit runs the next step on the layer below.
  rm -rf "$WORK"
  cp -a --reflink=auto "$DIR/layer1-$layer1_key" "$WORK"
  for step in "${LAYER2[@]}"; do
    log "  $step"
    if [[ "$step" == "COPY . ." ]]; then
      # tar replaces files as COPY does (cp refuses some it finds there, restored from layer 1).
      context_files | tar -C "$REPO" --null -T - -cf - | tar -C "$WORK/src" -xpf -
      if $ONE_LINE_CHANGE; then
        printf '%s\n' "$CHANGE_LINE" >>"$WORK/src/src/lib.rs"
      fi
    else
      run_step "$step"
    fi
  done
  # The final stage: COPY --from=build /src/out/karpenter-azure /karpenter-azure
  from="$(sed -n 's|^COPY --from=build /src/\([^ ]*\) /karpenter-azure$|\1|p' "$DOCKERFILE")"
  [[ -n "$from" ]] || die "the final stage needs COPY --from=build /src/<path> /karpenter-azure"
  # Only the binary is kept of layer 2 (the image's content); the four newest stay.
  # (find, not ls: ls fails when there is none yet, and pipefail would end the build)
  find "$DIR" -maxdepth 1 -name 'layer2-*' -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- |
    xargs -r rm -rf
  mkdir -p "$DIR/layer2-$layer2_key"
  cp "$WORK/src/$from" "$DIR/layer2-$layer2_key/karpenter-azure"
  layer2="built in $(($(date +%s) - t1))s"
fi
if ! $ONE_LINE_CHANGE; then
  cp "$DIR/layer2-$layer2_key/karpenter-azure" "$DIR/karpenter-azure.tmp"
  mv "$DIR/karpenter-azure.tmp" "$DIR/karpenter-azure"
fi
printf 'image-build %s: layer 1 %s, layer 2 %s, binary %s\n' "$ARCH" "$layer1" "$layer2" "$DIR/layer2-$layer2_key/karpenter-azure"
