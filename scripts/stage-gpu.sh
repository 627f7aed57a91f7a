#!/usr/bin/env bash
# Builds the release binaries the GPU machine runs and copies them (stripped) into .gpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
# The default members: the tool (cli/, its `oxccl`) and the library (its examples).
cargo build --release --bins --examples
mkdir -p .gpu
json=$(cargo test --release -p oxccl --benches --tests --no-run --message-format=json 2>/dev/null)
pick() { echo "$json" | python3 scripts/cargo_exe.py "$1"; }
cp "$(pick gpu)" .gpu/gpu
cp "$(pick host_overhead)" .gpu/host_overhead
cp target/release/oxccl target/release/examples/cudarc_slices target/release/examples/raw_pointers target/release/examples/pg_capture .gpu/
strip .gpu/* 2>/dev/null || true
du -sh .gpu
