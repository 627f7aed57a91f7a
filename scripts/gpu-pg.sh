#!/usr/bin/env bash
# The process-group runs on a GPU machine, from binaries staged in .gpu/ (see GPU_TESTS.md):
# the seed cases under torchrun, the data-parallel example, and the process-group benchmark.
# Usage: bash scripts/gpu-pg.sh NGPUS OUTDIR
set -u
n=${1:-2}; out=${2:-/tmp/oxccl-gpu}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
torchrun=$(command -v torchrun || echo /opt/torch/.venv/bin/torchrun)
nvidia-smi -L | tee "$out/gpus.txt"
run() { echo "== $*" | tee -a "$out/log"; "$@" 2>&1 | tee -a "$out/log"; echo "exit $?" | tee -a "$out/log"; }
# Case 2 needs only one GPU: two ranks bound to device 0.
run "$torchrun" --nproc_per_node 2 --no-python .gpu/pg_cases --same-device
# The cases that hold with one rank.
run "$torchrun" --nproc_per_node 1 --no-python .gpu/pg_cases case_03 case_10 case_12 case_18 case_19 case_20 case_21 case_24 case_27 case_28
if [ "$n" -ge 2 ]; then
    run "$torchrun" --nproc_per_node "$n" --no-python .gpu/pg_cases
    # NCCL's network transport (the inter-node path) forced on one node.
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run "$torchrun" --nproc_per_node "$n" --no-python .gpu/pg_cases case_03 case_17 case_18 case_26
    run "$torchrun" --nproc_per_node "$n" --no-python .gpu/ddp_step
    # CUDA-graph capture of the process group on every GPU (one rank each).
    run "$torchrun" --nproc_per_node "$n" --no-python .gpu/pg_capture
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run "$torchrun" --nproc_per_node "$n" --no-python .gpu/ddp_step
fi
run "$torchrun" --nproc_per_node 1 --no-python .gpu/ddp_step
# CUDA-graph capture, process group and Comm, on one GPU without a launcher.
run .gpu/pg_capture
OXCCL_BENCH_GPUS=$n run .gpu/pg_overhead
OXCCL_BENCH_GPUS=1 run .gpu/nan_check
