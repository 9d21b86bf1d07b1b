# Shared by the scripts that build a Go helper pinned by its own go.mod and cache the binary outside the
# repository (hack/aks-bootstrap.sh, hack/upstream-bench.sh, hack/upstream-disruption.sh,
# hack/upstream-oracle.sh). Source it after setting LOG_PREFIX.

log() { printf '[%s] %s\n' "$LOG_PREFIX" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$LOG_PREFIX" "$*" >&2; exit 1; }

# pinned_version <go.mod> <module>: the version of <module> that go.mod requires.
pinned_version() {
  local version
  version="$(awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$1")"
  [[ -n "$version" ]] || die "cannot find $2 in $1"
  printf '%s\n' "$version"
}

# content_hash <file>...: the first 12 hex digits of the sha256 of the files, concatenated; part of the
# cache key, so a change to our source or the pinned dependency graph builds afresh.
content_hash() { cat "$@" | sha256sum | cut -c1-12; }

# cache_dir <name>: the helper's cache, ${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}/<name>.
cache_dir() { printf '%s/%s\n' "${KARPENTER_AZURE_CACHE:-$HOME/.cache/karpenter-azure}" "$1"; }

# locked_build <key dir> <binary> <build function>: unless <binary> exists, runs <build function> under a
# lock in <key dir>, so concurrent callers build once; prints the binary's path.
locked_build() {
  local key_dir=$1 bin=$2 build=$3
  if [[ ! -x "$bin" ]]; then
    command -v go >/dev/null || die "go is required to build $(basename "$bin") (hack/deps.sh installs it)"
    mkdir -p "$key_dir"
    exec 9>"$key_dir/.build.lock"
    flock 9
    [[ -x "$bin" ]] || "$build"
    flock -u 9
  fi
  printf '%s\n' "$bin"
}

# finish_build <key dir> <built file> <binary> <t0>: moves the build into place and records how long it took.
finish_build() {
  local key_dir=$1 built=$2 bin=$3 t0=$4 t1
  mv -f "$built" "$bin"
  t1=$(date +%s)
  printf '%s %s %ss\n' "$(date -u +%FT%TZ)" "$(basename "$bin")" "$((t1 - t0))" >>"$key_dir/build-times.txt"
  log "built $bin in $((t1 - t0))s"
}

# go_build_helper <source dir> <key dir> <binary> <module@version>: `go build` of the helper whose only
# package is <source dir> (a main package pinned by its own go.mod), niced by $BUILD_NICE (each script sets it from its own variable).
go_build_helper() {
  local src_dir=$1 key_dir=$2 bin=$3 pinned=$4 t0 tmp
  t0=$(date +%s)
  tmp="$key_dir/.$(basename "$bin").tmp"
  log "building the helper against $pinned (the first build downloads modules; minutes) ..."
  (cd "$src_dir" && nice -n "${BUILD_NICE:-10}" go build -mod=readonly -trimpath -o "$tmp" .) \
    >"$key_dir/build.log" 2>&1 || die "go build failed; see $key_dir/build.log"
  finish_build "$key_dir" "$tmp" "$bin" "$t0"
}

# go_test_build_with_overlay <go.mod dir> <key dir> <binary> <module> <version> <package dir> <tags> <file>...:
# `go test -c` of <module>'s package <package dir> with our <file>s (in <go.mod dir>) added to it by
# `go test -overlay`, niced by $BUILD_NICE. go refuses overlays beneath GOMODCACHE, so the module is built from a copy in
# <key dir> (never in the repository), selected by a replace in a private copy of our go.mod (-modfile).
go_test_build_with_overlay() {
  local mod_dir=$1 key_dir=$2 bin=$3 module=$4 version=$5 pkg_dir=$6 tags=$7
  shift 7
  local log_file="$key_dir/build.log" dir src t0 f replace="" tmp
  t0=$(date +%s)
  tmp="$key_dir/.$(basename "$bin").tmp"
  log "building upstream $module@$version package $pkg_dir with ${*} (first build takes minutes) ..."
  : >"$log_file"
  # The module as the proxy serves it (go verifies it against go.sum).
  dir="$(cd "$mod_dir" && go mod download -json "$module@$version" 2>>"$log_file" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -d "$dir" ]] || die "go mod download $module@$version failed; see $log_file"
  src="$key_dir/src/$(basename "$module")"
  rm -rf "$key_dir/src"
  mkdir -p "$key_dir/src"
  cp -R "$dir" "$src"
  chmod -R u+w "$src"
  cp "$mod_dir/go.mod" "$key_dir/build.mod"
  cp "$mod_dir/go.sum" "$key_dir/build.sum"
  go mod edit -replace="$module@$version=$src" "$key_dir/build.mod"
  # Snapshots of the overlay files the key was computed from.
  for f in "$@"; do
    cp "$mod_dir/$f" "$key_dir/$f"
    replace+="${replace:+, }\"$src/$pkg_dir/$f\": \"$key_dir/$f\""
  done
  printf '{"Replace": {%s}}\n' "$replace" >"$key_dir/overlay.json"
  (
    cd "$mod_dir"
    nice -n "${BUILD_NICE:-10}" go test -c -mod=readonly -modfile="$key_dir/build.mod" \
      -trimpath -tags="$tags" -overlay="$key_dir/overlay.json" -o "$tmp" "$module/$pkg_dir"
  ) >>"$log_file" 2>&1 || die "go test -c failed; see $log_file"
  finish_build "$key_dir" "$tmp" "$bin" "$t0"
}
