#!/usr/bin/env bash
# Builds the kernels' probe (probe.cu) on a GPU machine (nvcc in /usr/local/cuda/bin) and puts
# it beside copies of the shipped PTX (kernels/peer_reduce*.ptx, made by gen_ptx.py):
#   gen.sh OUT && PROBE_PDL=1 OUT/probe OUT/peer_reduce_sm90.ptx 2   # as the library on H100+
#   gen.sh OUT && OUT/probe OUT/peer_reduce.ptx 2                    # the compute_80 kernels
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: gen.sh OUT}"
nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
nccl="${NCCL_HOME:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}"
mkdir -p "$out"
cp "$here/peer_reduce.ptx" "$here/peer_reduce_sm90.ptx" "$out/"
"$nvcc" -O2 -arch=sm_90 -std=c++17 "$here/probe.cu" -I"$nccl/include" -L"$nccl/lib" -l:libnccl.so.2 \
    -lcuda -lpthread -o "$out/probe"
echo "probe: $out/probe"
