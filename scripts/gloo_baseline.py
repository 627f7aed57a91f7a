"""all_reduce latency and algbw with torch.distributed's gloo backend, measured as
oxccl/examples/allreduce_bench.rs measures oxccl (f32 sum in place, 3 warm-up calls, then `iters`
calls each waited for, between two barriers; rank 0 prints one line per size).

Run: .cache/torch-venv/bin/torchrun --nproc_per_node 4 scripts/gloo_baseline.py
"""
import time

import torch
import torch.distributed as dist


def iters(nbytes):
    return max(5, min(200, (256 << 20) // nbytes))


def main():
    dist.init_process_group("gloo")
    me, n = dist.get_rank(), dist.get_world_size()
    if me == 0:
        print(f"# gloo all_reduce, {n} ranks, f32 sum in place (torch {torch.__version__})")
        print(f"{'bytes':>12} {'iters':>8} {'latency_us':>14} {'algbw_GB/s':>14}")
    for nbytes in [8 << (3 * k) for k in range(8)] + [64 << 20]:
        buf = torch.ones(nbytes // 4, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(buf)
        it = iters(nbytes)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(it):
            dist.all_reduce(buf)
        secs = (time.perf_counter() - start) / it
        dist.barrier()
        if me == 0:
            print(f"{nbytes:>12} {it:>8} {secs * 1e6:>14.1f} {nbytes / secs / 1e9:>14.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
