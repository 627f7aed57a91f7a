#!/usr/bin/env bash
# Creates (once) a Python virtual environment with PyTorch at <repo>/.cache/torch-venv, for the
# TCPStore interop tests (oxccl/tests/store_interop.rs), and prints its interpreter's path on the last
# line. TCPStore needs no GPU; the wheel is large (~4.6 GB with its CUDA libraries) but is
# installed only once: a venv whose torch imports is kept as it is.
#
# Environment:
#   OXCCL_TORCH_VENV   where the venv lives (default: <repo>/.cache/torch-venv)
#   OXCCL_TORCH_SPEC   the pip spec to install (default: torch)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${OXCCL_TORCH_VENV:-$root/.cache/torch-venv}"
spec="${OXCCL_TORCH_SPEC:-torch}"
py="$venv/bin/python"

# Cached: a venv whose torch imports and has TCPStore is reused untouched.
if [[ -x "$py" ]] && "$py" -c 'import torch.distributed as d; d.TCPStore' >/dev/null 2>&1; then
    echo "torch-env: cached in $venv (torch $("$py" -W ignore -c 'import torch; print(torch.__version__)' 2>/dev/null))" >&2
    echo "$py"
    exit 0
fi

command -v python3 >/dev/null || { echo "torch-env: python3 is needed" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
if [[ ! -x "$py" ]]; then
    echo "torch-env: creating $venv" >&2
    python3 -m venv "$venv"
fi
echo "torch-env: installing $spec (large, once)" >&2
# No pip cache: the wheels (several GB with CUDA's libraries) would sit on disk a second time.
"$py" -m pip install --disable-pip-version-check --no-input --no-cache-dir -q "$spec" >&2
"$py" -c 'import torch.distributed as d; d.TCPStore' ||
    { echo "torch-env: torch installed but torch.distributed.TCPStore is unavailable" >&2; exit 1; }
echo "torch-env: torch $("$py" -W ignore -c 'import torch; print(torch.__version__)' 2>/dev/null) ready in $venv" >&2
echo "$py"
