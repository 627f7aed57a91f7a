#!/usr/bin/env bash
# The process group's cost over `Comm` on GPUs, two builds side by side (issue 28's goal: pg
# within 1.05x of comm at 8 B-256 KiB): `oxccl perf all_reduce --layer all` a thread per GPU
# and a process per GPU (torchrun), and `oxccl/benches/pg_overhead.rs`, the builds alternated round
# by round on the same machine. With one GPU (one rank, in place: nothing runs on the GPU, so
# the host path alone) pg_overhead is left out and `pg_host`'s GPU rows are added.
#
#   here:   bash scripts/gpu-pg-ab.sh stage [BASE_REV]   # BASE_REV (default HEAD~1) and the
#                                                        # working tree into .gpu/pg-ab/{base,head}
#   there:  bash scripts/gpu-pg-ab.sh run OUTDIR [ROUNDS] # default 4 rounds, every GPU it sees
#
# OUTDIR gets the raw lines (perf_threads.txt, perf_procs.txt: "build round layer bytes
# out-of-place in-place"; overhead.txt) and summary.txt: per build and size, the median over
# rounds of comm, pg, pg - comm and pg / comm (in-place times, us).
set -u
cmd=${1:-}; shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin=.gpu/pg-ab

build_into() { # DIR: the tool and the bench of the tree in the current directory
    local json
    json=$(cargo build --release --bin oxccl --message-format=json-render-diagnostics) || return 1
    echo "$json" | python3 "$root/scripts/cargo_exe.py" --into "$1" oxccl || return 1
    json=$(cargo bench --bench pg_overhead --bench pg_host --no-run \
        --message-format=json-render-diagnostics) || return 1
    echo "$json" | python3 "$root/scripts/cargo_exe.py" --into "$1" pg_overhead pg_host || return 1
    strip "$1"/* 2>/dev/null || true
}

if [ "$cmd" = stage ]; then
    set -eo pipefail
    base=${1:-HEAD~1}
    rm -rf "$bin" && mkdir -p "$bin/base" "$bin/head"
    tree=$(mktemp -d)
    git worktree add -f --detach "$tree" "$base" > /dev/null
    (cd "$tree" && CARGO_TARGET_DIR="$tree/target" build_into "$root/$bin/base")
    git worktree remove --force "$tree"
    build_into "$bin/head"
    git rev-parse --short "$base" > "$bin/base/REV"
    echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +)" > "$bin/head/REV"
    du -sh "$bin"
    exit 0
fi

[ "$cmd" = run ] || { echo "usage: $0 stage [BASE_REV] | run OUTDIR [ROUNDS]" >&2; exit 2; }
out=${1:?OUTDIR}; rounds=${2:-4}
mkdir -p "$out"
n=$(nvidia-smi -L | wc -l)
lib=${OXCCL_NCCL_LIBRARY:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2}
torchrun=${TORCHRUN:-/opt/torch/.venv/bin/torchrun}
export NCCL_NVLS_ENABLE=0
perf_args=(perf all_reduce -b 8 -e 256K -f 8 -n "${ITERS:-5000}" -w 500 --layer all --library "$lib")
pick='$1=="comm"||$1=="pg"||$1=="raw" {print b, r, $1, $3, $8, $12}'
for r in $(seq "$rounds"); do
    for b in base head; do
        "$bin/$b/oxccl" "${perf_args[@]}" -g "$n" 2>&1 | awk -v b=$b -v r=$r "$pick" >> "$out/perf_threads.txt"
        "$torchrun" --nproc-per-node "$n" --no-python "$bin/$b/oxccl" "${perf_args[@]}" 2>&1 |
            awk -v b=$b -v r=$r "$pick" >> "$out/perf_procs.txt"
        if [ "$r" -le 2 ] && [ "$n" -ge 2 ]; then
            echo "== $b round $r" >> "$out/overhead.txt"
            OXCCL_BENCH_GPUS=$n OXCCL_NCCL_LIBRARY=$lib timeout 300 "$bin/$b/pg_overhead" >> "$out/overhead.txt" 2>&1
        fi
    done
done
if [ "$n" -eq 1 ]; then
    OXCCL_BENCH_GPUS=1 OXCCL_BENCH_ROUNDS=40 OXCCL_NCCL_LIBRARY=$lib timeout 150 \
        "$bin/head/pg_host" > "$out/pg_host_gpu.txt" 2>&1
fi
{
    echo "GPUs: $n; base $(cat $bin/base/REV), head $(cat $bin/head/REV); NCCL $lib"
    for f in "$out"/perf_threads.txt "$out"/perf_procs.txt; do
        [ -s "$f" ] && { echo "== $(basename "$f" .txt)"; python3 scripts/pg_ab_summary.py "$f"; }
    done
} | tee "$out/summary.txt"
