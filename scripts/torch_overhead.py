"""Host cost of one torch.distributed all_reduce, measured like oxccl/benches/host_overhead.rs.

Run with torchrun on the GPU machine: `python3 -m torch.distributed.run --nproc_per_node=2
scripts/torch_overhead.py`. Each rank issues 200 all_reduces of 8 bytes (float32 x 2) back to
back and times only the issuing loop; 200 rounds; rank 0 prints the median and minimum ns/call
beside the table in docs/BENCHMARKS.md#host-overhead-per-operation.
"""
import time

import torch
import torch.distributed as dist

CALLS, ROUNDS, WARMUP = 200, 200, 5


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    x = torch.ones(2, device="cuda")
    samples = []
    for r in range(WARMUP + ROUNDS):
        dist.barrier()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(CALLS):
            dist.all_reduce(x)
        ns = (time.perf_counter() - t) / CALLS * 1e9
        torch.cuda.synchronize()
        if r >= WARMUP:
            samples.append(ns)
    samples.sort()
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
        print(f"| torch.distributed all_reduce | {samples[len(samples) // 2]:.0f} | {samples[0]:.0f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
