# Shared by the scripts that build a Go helper pinned by its own go.mod and cache the binary outside the
# repository (hack/aks-bootstrap.sh, hack/upstream-bench.sh, hack/upstream-oracle.sh). Source it after
# setting LOG_PREFIX.

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
