#!/usr/bin/env bash
# The benchmark runs behind docs/BENCHMARKS.md: oxccl perf (raw, comm and pg layers side by
# side), nccl-tests built from source on the GPU machine, and torch.distributed, in one device run.
#
#   here:   bash scripts/gpu-perf.sh stage            # .gpu/oxccl (release) + .gpu/nccl-tests source
#   there:  bash scripts/gpu-perf.sh run NGPUS OUTDIR [PART...]
#
# PARTs (default: all of them, in this order): info check oxccl nccl-tests modes procs torch.
# Every part writes its tables (*.txt), JSON (*.json) and charts (*.svg) under OUTDIR. Compare
# like with like: oxccl drives a GPU per thread, so nccl-tests runs with -t NGPUS -g 1.
set -u
cmd=${1:-}; shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "$cmd" = stage ]; then
    set -e
    cargo build --release --bin oxccl
    mkdir -p .gpu
    cp target/release/oxccl .gpu/oxccl && strip .gpu/oxccl || true
    # nccl-tests' source (the GPU machine has no network): from a local clone or mirror.
    src=${NCCL_TESTS_GIT:-/work/.mirror/NVIDIA+nccl-tests/repo}
    rm -rf .gpu/nccl-tests && mkdir -p .gpu/nccl-tests
    git --git-dir="$src" archive HEAD | tar -x -C .gpu/nccl-tests
    du -sh .gpu
    exit 0
fi
[ "$cmd" = run ] || { echo "usage: $0 stage | run NGPUS OUTDIR [PART...]" >&2; exit 2; }

n=${1:-2}; out=${2:-/tmp/oxccl-perf}; shift 2 || true
parts=${*:-info check oxccl nccl-tests modes procs torch}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
# One NCCL for all three: the one PyTorch uses.
nccl_home=${NCCL_HOME:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export OXCCL_NCCL_LIBRARY=$nccl_home/lib/libnccl.so.2
torchrun=$(command -v torchrun || echo /opt/torch/.venv/bin/torchrun)
python=$(dirname "$torchrun")/python3
colls="all_reduce all_gather reduce_scatter broadcast alltoall"
sweep="-b 8 -e 1G -f 2 -n 20 -w 5"
nt=.gpu/nccl-tests/build

log() { echo "== $*" | tee -a "$out/log"; }
run() { log "$*"; "$@" 2>&1 | tee -a "$out/log"; echo "exit ${PIPESTATUS[0]}" | tee -a "$out/log"; }
nccl_tests() {
    if [ ! -x "$nt/all_reduce_perf" ]; then
        log "building nccl-tests"
        make -C .gpu/nccl-tests -j16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$nccl_home" >>"$out/log" 2>&1
    fi
    LD_LIBRARY_PATH=$nccl_home/lib:${LD_LIBRARY_PATH:-} run "$nt/${1}_perf" "${@:2}"
}

for part in $parts; do
    case $part in
    info)
        nvidia-smi -L | tee "$out/gpus.txt"
        run .gpu/oxccl info
        .gpu/oxccl info --json >"$out/info.json" ;;
    check)
        run .gpu/oxccl check --backend nccl -g "$n" ;;
    oxccl)
        # The three layers side by side, alternated within each size, results checked once.
        for c in $colls; do
            run .gpu/oxccl perf "$c" $sweep -g "$n" --layer all -c 1 \
                --json-out "$out/oxccl_$c.json" --svg "$out/oxccl_$c.svg"
        done ;;
    nccl-tests)
        for c in $colls; do
            nccl_tests "$c" $sweep -t "$n" -g 1 -c 1 | tee "$out/nccl-tests_$c.txt" >/dev/null
        done ;;
    modes)
        # Registration and graphs: nccl-tests and oxccl alternated, twice (small sizes swing).
        for rep in 1 2; do
            for m in "-R 0 -G 0" "-R 1 -G 0" "-R 2 -G 0" "-R 0 -G 10" "-R 2 -G 10"; do
                for c in all_reduce all_gather; do
                    tag=$(echo "$c $m" | tr -d ' -')
                    nccl_tests "$c" -b 8 -e 128M -f 8 -n 20 -w 5 -t "$n" -g 1 $m >"$out/nccl-tests_$tag.r$rep.txt"
                    run .gpu/oxccl perf "$c" -b 8 -e 128M -f 8 -n 20 -w 5 -g "$n" --layer all $m \
                        --json-out "$out/oxccl_$tag.r$rep.json"
                done
            done
        done ;;
    procs)
        # One process per GPU under torchrun, as a training job runs.
        run "$torchrun" --nproc_per_node "$n" --no-python .gpu/oxccl perf all_reduce $sweep \
            --layer all --json-out "$out/oxccl_procs_all_reduce.json" ;;
    torch)
        run "$torchrun" --nproc_per_node "$n" scripts/torch_baseline.py $colls $sweep -c 1 \
            --json-out "$out/torch.json" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
    esac
done
