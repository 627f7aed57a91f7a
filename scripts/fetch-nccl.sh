#!/usr/bin/env bash
# Fetches the NCCL releases oxccl's tests load (no GPU needed): one per version gate the loader
# knows. Each wheel is downloaded with pip, only `libnccl.so.2` and `nccl.h` are kept under
# .cache/nccl/<version>/{lib,include}, and the wheel is deleted. Versions already cached are
# skipped, so running it again is cheap. Downloads run in parallel (they are 165-305 MB each)
# and bypass pip's cache: the wheel is deleted once read, a cached copy would only take disk.
#
# Environment:
#   OXCCL_NCCL_CACHE   where to put the releases (default: <repo>/.cache/nccl)
#   OXCCL_WHEEL_DIR    a folder of already downloaded wheels to use before pip (default:
#                      <repo>/.cache/wheels); a wheel found there is kept, not deleted
#   OXCCL_NCCL_JOBS    parallel downloads (default 4)
#   OXCCL_NCCL_MATRIX  space-separated pip specs replacing the default matrix
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${OXCCL_NCCL_CACHE:-$root/.cache/nccl}"
wheels="${OXCCL_WHEEL_DIR:-$root/.cache/wheels}"
jobs="${OXCCL_NCCL_JOBS:-4}"

# One release per gate: 2.13 (oldest supported, last-error), 2.14 (config, nonblocking),
# 2.18 (split), 2.19 (register, mem-alloc), 2.23 (group-simulate, scalable init), 2.28
# (all-to-all, gather, scatter), 2.32 (everything: shrink, windows, revoke, grow, signals,
# suspend, timeout code, per-collective config).
default_matrix="nvidia-nccl-cu11==2.13.4 nvidia-nccl-cu11==2.14.3 nvidia-nccl-cu12==2.18.3
nvidia-nccl-cu12==2.19.3 nvidia-nccl-cu12==2.23.4 nvidia-nccl-cu12==2.28.3 nvidia-nccl-cu13==2.32.3"
read -r -a matrix <<<"$(echo ${OXCCL_NCCL_MATRIX:-$default_matrix})"

for tool in pip python3; do
    command -v "$tool" >/dev/null || { echo "fetch-nccl: $tool is needed" >&2; exit 1; }
done
mkdir -p "$cache"

# Fetches one pip spec into $cache/<version>; prints one line per step.
fetch_one() {
    local spec="$1"
    local version="${spec##*==}" pkg="${spec%%==*}"
    local dest="$cache/$version"
    if [[ -f "$dest/lib/libnccl.so.2" && -f "$dest/include/nccl.h" ]]; then
        echo "[$version] cached in $dest, skipped"
        return 0
    fi
    local tmp
    tmp="$(mktemp -d "$cache/.tmp-$version.XXXXXX")"
    # Clean the scratch folder however this function ends.
    trap 'rm -rf "$tmp"' RETURN
    local wheel=""
    local seed
    for seed in "$wheels"/"${pkg//-/_}"-"$version"-*.whl; do
        [[ -f "$seed" ]] && wheel="$seed" && echo "[$version] using $seed"
        break
    done
    if [[ -z "$wheel" ]]; then
        echo "[$version] downloading $spec"
        local start=$SECONDS
        if ! pip download --no-cache-dir --no-deps --only-binary=:all: --quiet -d "$tmp/dl" "$spec" >"$tmp/pip.log" 2>&1; then
            echo "[$version] pip download $spec failed:" >&2
            sed "s/^/[$version]   /" "$tmp/pip.log" >&2
            return 1
        fi
        wheel="$(ls "$tmp"/dl/*.whl)"
        echo "[$version] downloaded $(basename "$wheel") ($(du -m "$wheel" | cut -f1) MB, $((SECONDS - start)) s)"
    fi
    python3 - "$wheel" "$tmp/out" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
want = {"nvidia/nccl/lib/libnccl.so.2": "lib/libnccl.so.2",
        "nvidia/nccl/include/nccl.h": "include/nccl.h"}
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    for src, dst in want.items():
        if src not in names:
            sys.exit(f"{wheel} has no {src}")
        path = os.path.join(out, dst)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(src) as r, open(path, "wb") as w:
            while chunk := r.read(1 << 20):
                w.write(chunk)
PY
    # Publish atomically: a half-extracted release never looks cached.
    rm -rf "$dest"
    mv "$tmp/out" "$dest"
    if [[ "$wheel" == "$tmp"/* ]]; then
        echo "[$version] unpacked lib/libnccl.so.2 and include/nccl.h into $dest (wheel deleted)"
    else
        echo "[$version] unpacked lib/libnccl.so.2 and include/nccl.h into $dest (seed wheel kept)"
    fi
}

pids=()
specs=()
failed=0
for spec in "${matrix[@]}"; do
    # Keep at most $jobs downloads running.
    while (($(jobs -rp | wc -l) >= jobs)); do
        wait -n || true
    done
    fetch_one "$spec" &
    pids+=("$!")
    specs+=("$spec")
done
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "fetch-nccl: ${specs[$i]} failed" >&2
        failed=1
    fi
done
echo "fetch-nccl: cache $cache holds: $(cd "$cache" && ls -d */ 2>/dev/null | tr -d / | sort -V | tr '\n' ' ')"
exit "$failed"
