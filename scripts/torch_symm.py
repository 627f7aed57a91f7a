#!/usr/bin/env python3
"""torch's symmetric-memory all-reduce kernels, timed as anchors for oxccl's own (issue 28).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        torchrun --nproc-per-node N scripts/torch_symm.py [--max 262144] [--iters 2000]

A process per GPU. For each size (bytes of float32, doubling from 8) and each of torch's
one-shot (out of place) and two-shot (in place) kernels: eager, µs per op over back-to-back
calls (best of 3 rounds), and in a CUDA graph of 20 ops replayed 50 times. Rank 0 prints a
table and one JSON line per size. Multicast stays off (never create multicast objects on the
shared machines): the variables above must be set before torch starts.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def graphed(fn, ops=20, launches=50):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(ops):
            fn()
    g.replay()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(launches):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (ops * launches) * 1e6


def slowest(v):
    t = torch.tensor([v], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=256 * 1024)
    ap.add_argument("--iters", type=int, default=2000)
    a = ap.parse_args()
    for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST"):
        want = "0" if var == "NCCL_NVLS_ENABLE" else "1"
        if os.environ.get(var) != want:
            raise SystemExit(f"set {var}={want} first (no NVLink multicast on shared machines)")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    group = dist.group.WORLD.group_name
    n = dist.get_world_size()
    buf = symm_mem.empty(a.max // 4, dtype=torch.float32, device="cuda")
    symm_mem.rendezvous(buf, group)
    rows = []
    size = 8
    while size <= a.max:
        x = buf[: size // 4]
        x.fill_(1.0)
        one = lambda: torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group)
        two = lambda: torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", group)
        row = {"bytes": size, "ranks": n}
        for name, fn in (("one_shot", one), ("two_shot", two)):
            try:
                row[name + "_eager_us"] = slowest(min(timed(fn, a.iters) for _ in range(3)))
                row[name + "_graph_us"] = slowest(graphed(fn))
            except Exception as e:  # a kernel that refuses this size or type
                row[name + "_error"] = str(e).splitlines()[0][:120]
        rows.append(row)
        size *= 2
    if dist.get_rank() == 0:
        f = lambda r, k: f"{r[k]:10.2f}" if k in r else f"{'-':>10}"
        print(f"torch {torch.__version__}, {n} GPUs, float32 sum, µs per op (slowest rank)")
        print(f"{'bytes':>9} {'1shot':>10} {'1shot-g':>10} {'2shot':>10} {'2shot-g':>10}")
        for r in rows:
            print(f"{r['bytes']:>9}", f(r, "one_shot_eager_us"), f(r, "one_shot_graph_us"),
                  f(r, "two_shot_eager_us"), f(r, "two_shot_graph_us"))
        for r in rows:
            print(json.dumps(r))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
