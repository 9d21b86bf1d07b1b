#!/usr/bin/env bash
# Runs the build stage of the Dockerfile without a container engine, for one architecture, the way
# BuildKit runs it: the dependency layer (the manifests and the lock file with stub sources; reused while
# they and its steps are unchanged, as BuildKit's layer cache would), then the sources.
#
#   hack/image-build.sh ARCH                    build; prints the binary's path last
#   hack/image-build.sh ARCH --one-line-change  on a copy of the build, change one line of the sources
#                                               and build again: prints the time and fails if any
#                                               dependency is compiled again
#
# ARCH is amd64 or arm64 (BuildKit's TARGETARCH). Work happens in $IMAGE_DIR/<ARCH> (default
# <cargo target dir>/image): the build context, the cargo target directory and the binary.
# The steps that install tools in the image (apk, pip, rustup) are what hack/deps.sh installs here.
# Cargo runs with only the variables listed in BUILD_ENV, so build scripts see the same environment
# whoever calls this (hack/test.sh in the background, tests/container_image.rs).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HACK_DIR/.." && pwd)"
LOG_PREFIX=image-build
# shellcheck source=hack/lib.sh
source "$HACK_DIR/lib.sh"

ARCH="${1:-}"
MODE="${2:-build}"
case "$ARCH" in amd64 | arm64) ;; *) die "usage: $0 amd64|arm64 [--one-line-change]" ;; esac
case "$MODE" in build | --one-line-change) ;; *) die "unknown option $MODE" ;; esac

IMAGE_DIR="${IMAGE_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/image}"
WORK="$IMAGE_DIR/$ARCH"
CONTEXT="$WORK/context"
mkdir -p "$WORK"

BUILD_ENV=(PATH HOME CARGO_HOME RUSTUP_HOME RUSTUP_TOOLCHAIN TMPDIR)
clean_env=()
for var in "${BUILD_ENV[@]}"; do
  if [ -n "${!var+set}" ]; then clean_env+=("$var=${!var}"); fi
done

# The build stage's instructions: from its FROM to the next FROM.
stage_lines() { awk '/^FROM /{n++; next} n==1 && !/^[[:space:]]*(#|$)/' "$ROOT/Dockerfile"; }

# Runs one RUN line in the context, as /bin/sh in the image would; the image's /karpenter-azure is
# $WORK/karpenter-azure here.
run_line() {
  local cmd="${1//\/karpenter-azure/$WORK/karpenter-azure}"
  (cd "$CONTEXT" && env -i "${clean_env[@]}" TARGETARCH="$ARCH" CARGO_TARGET_DIR="$target_dir" sh -c "$cmd")
}

# The files of the build context, as `docker build .` sends them (.dockerignore: target, .git).
context_files() { (cd "$ROOT" && git ls-files -co --exclude-standard | grep -v -e '^target/' -e '^\.git/'); }

target_dir="$WORK/target"
deps_steps=()
source_steps=()
deps_copies=()
phase=deps
while IFS= read -r line; do
  instruction="${line%% *}"
  rest="${line#* }"
  case "$instruction" in
    ARG | ENV | WORKDIR) ;; # TARGETARCH, CARGO_TARGET_DIR and the context are set above
    COPY)
      if [ "$rest" = ". ." ]; then phase=sources; else deps_copies+=("$rest"); fi
      ;;
    RUN)
      case "$rest" in
        apk\ * | pip\ * | rustup\ *) ;; # tools of the image: hack/deps.sh installs them here
        *) if [ "$phase" = deps ]; then deps_steps+=("$rest"); else source_steps+=("$rest"); fi ;;
      esac
      ;;
    *) die "Dockerfile: the build stage has an instruction this script does not run: $line" ;;
  esac
done < <(stage_lines)
[ "$phase" = sources ] || die "Dockerfile: the build stage has no 'COPY . .'"

# The dependency layer, keyed like BuildKit's cache: its instructions and the files it copies.
key="$(
  {
    printf '%s\n' "$ARCH" "${deps_copies[@]}" "${deps_steps[@]}"
    for copy in "${deps_copies[@]}"; do
      read -r -a words <<<"$copy"
      for src in "${words[@]:0:${#words[@]}-1}"; do cat "$ROOT/$src"; done
    done
  } | sha256sum | cut -d' ' -f1
)"
t0=$(date +%s)
if [ "$(cat "$WORK/deps.key" 2>/dev/null)" = "$key" ] && [ -d "$target_dir" ]; then
  log "$ARCH: dependency layer cached"
else
  rm -rf "$CONTEXT" "$WORK/deps.key"
  mkdir -p "$CONTEXT"
  for copy in "${deps_copies[@]}"; do
    read -r -a words <<<"$copy"
    dest="${words[${#words[@]}-1]}"
    mkdir -p "$CONTEXT/$dest"
    for src in "${words[@]:0:${#words[@]}-1}"; do cp "$ROOT/$src" "$CONTEXT/$dest"; done
  done
  for step in "${deps_steps[@]}"; do run_line "$step"; done
  echo "$key" >"$WORK/deps.key"
  log "$ARCH: dependency layer built in $(($(date +%s) - t0)) s"
fi

# The sources layer: the context as `COPY . .` leaves it (the layer's files, then the build context's).
sync_sources() {
  context_files | tar -C "$ROOT" -cf - -T - | tar -C "$CONTEXT" -xf -
}

# The sources layer's cache key: the dependency layer's, its steps and every file of the context.
sources_key() {
  {
    printf '%s\n' "$key" "${source_steps[@]}"
    (cd "$ROOT" && context_files | while IFS= read -r f; do [ -f "$f" ] && sha256sum "$f"; done)
  } | sha256sum | cut -d' ' -f1
}

if [ "$MODE" = build ]; then
  t1=$(date +%s)
  skey="$(sources_key)"
  if [ "$(cat "$WORK/sources.key" 2>/dev/null)" = "$skey" ] && [ -f "$WORK/karpenter-azure" ]; then
    log "$ARCH: sources layer cached"
  else
    rm -f "$WORK/sources.key"
    sync_sources
    for step in "${source_steps[@]}"; do run_line "$step"; done
    echo "$skey" >"$WORK/sources.key"
    log "$ARCH: sources built in $(($(date +%s) - t1)) s"
  fi
  echo "$WORK/karpenter-azure"
  exit 0
fi

# --one-line-change: the dependency layer as it is, the sources with one line changed, on a copy of the
# build so the cached one stays as it was.
copy="$WORK/one-line-change"
rm -rf "$copy"
cp -a "$target_dir" "$copy"
target_dir="$copy"
sync_sources
echo "// a one-line change" >>"$CONTEXT/src/main.rs"
t1=$(date +%s)
output="$(for step in "${source_steps[@]}"; do run_line "$step" 2>&1; done)"
seconds=$(($(date +%s) - t1))
cp "$ROOT/src/main.rs" "$CONTEXT/src/main.rs"
rm -rf "$copy"
compiled="$(printf '%s\n' "$output" | sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' | sort -u | tr '\n' ' ')"
echo "one-line change ($ARCH): rebuilt in $seconds s; compiled: $compiled"
for crate in $compiled; do
  case "$crate" in
    karpenter-azure | karpenter-azure-core | fake-azure) ;;
    *) die "the one-line change compiled the dependency $crate again: the dependency layer was not reused" ;;
  esac
done
