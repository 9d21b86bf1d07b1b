#!/usr/bin/env bash
# Regenerates the VM-size data embedded in src/catalog/data/.
#
# Usage: hack/gen-catalog.sh <azure-vm-skus.json> <azure-zones.json>
#
# The inputs are the compiled catalog described in the data README (one JSON object per VM size, and
# region -> logical zones). This script only validates and copies them: the crate parses them at first use
# (include_str! + serde_json), so a malformed file must be caught here, not at run time.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <azure-vm-skus.json> <azure-zones.json>" >&2
  exit 2
fi

skus_src=$1
zones_src=$2
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$repo_root/src/catalog/data"

validate() {
  local file=$1 kind=$2
  python3 - "$file" "$kind" <<'PY'
import json, sys
path, kind = sys.argv[1], sys.argv[2]
with open(path, encoding="utf-8") as f:
    data = json.load(f)
if kind == "skus":
    if not isinstance(data, list) or not data:
        sys.exit(f"{path}: expected a non-empty JSON array of VM sizes")
    required = ("name", "series", "vcpus", "memory_mib", "arch", "gpu_count", "restricted", "prices")
    names = set()
    for i, sku in enumerate(data):
        missing = [k for k in required if k not in sku]
        if missing:
            sys.exit(f"{path}: entry {i} lacks {missing}")
        if sku["arch"] not in ("amd64", "arm64"):
            sys.exit(f"{path}: {sku['name']}: unknown arch {sku['arch']!r}")
        if sku["name"] in names:
            sys.exit(f"{path}: duplicate size {sku['name']}")
        names.add(sku["name"])
    print(f"{path}: {len(data)} VM sizes")
else:
    if not isinstance(data, dict) or not data:
        sys.exit(f"{path}: expected a JSON object region -> zones")
    for region, zones in data.items():
        if not isinstance(zones, list) or not all(isinstance(z, str) for z in zones):
            sys.exit(f"{path}: {region}: zones must be a list of strings")
    print(f"{path}: {len(data)} regions")
PY
}

validate "$skus_src" skus
validate "$zones_src" zones

mkdir -p "$dest"
install -m 0644 "$skus_src" "$dest/azure-vm-skus.json"
install -m 0644 "$zones_src" "$dest/azure-zones.json"
echo "wrote $dest/azure-vm-skus.json and $dest/azure-zones.json"
