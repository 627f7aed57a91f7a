#!/usr/bin/env bash
# Runs oxccl's GPU acceptance tests, examples and host-overhead benchmark on a GPU machine.
# Usage (on the GPU machine, from the repository root): scripts/gpu-suite.sh <n-gpus> [out-dir]
# Expects the binaries staged by scripts/stage-gpu.sh in .gpu/.
set -uo pipefail
n=${1:-2}
out=${2:-${OUT:-/tmp/oxccl-gpu}}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0   # NVLink multicast stays off on the shared machines
sys_lib=/usr/lib/x86_64-linux-gnu/libnccl.so.2
torch_lib=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
libs=""
for l in "$sys_lib" "$torch_lib"; do [ -e "$l" ] && libs="$libs${libs:+:}$l"; done
{
  nvidia-smi -L
  for l in ${libs//:/ }; do .gpu/oxccl info --library "$l"; done
} 2>&1 | tee "$out/info.log"
# One test at a time, each under its own time limit, so a hang shows which test and spares the rest.
tests=${OXCCL_GPU_TESTS:-$(.gpu/gpu --list 2>/dev/null | sed -n 's/: test$//p' | grep -v gpu_child_rank)}
for t in $tests; do
  OXCCL_TEST_GPUS=$n OXCCL_TEST_LIBRARIES=$libs timeout "${OXCCL_GPU_TEST_TIMEOUT:-150}" \
    .gpu/gpu --exact "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$out/gpu-tests.log"
  echo "== $t exit ${PIPESTATUS[0]}" | tee -a "$out/gpu-tests.log"
done
{
  .gpu/cudarc_slices "$n"
  .gpu/raw_pointers "$n"
  for l in ${libs//:/ }; do OXCCL_NCCL_LIBRARY=$l OXCCL_BENCH_GPUS=$n .gpu/host_overhead; done
  # PyTorch's process group issuing the same all_reduce, same machine, same run
  py=python3
  [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
  if "$py" -c "import torch" 2>/dev/null; then
    timeout 300 "$py" -m torch.distributed.run --nproc_per_node="$n" scripts/torch_overhead.py
  fi
} 2>&1 | tee "$out/bench.log"
