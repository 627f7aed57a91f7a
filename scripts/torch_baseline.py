"""The `oxccl perf` sweep through torch.distributed, with the same columns and JSON schema, so the
two runs lay side by side (layer "torch").

Run with torchrun on a GPU machine, one process per GPU:

    torchrun --nproc_per_node 2 scripts/torch_baseline.py all_reduce all_gather -b 8 -e 1G -f 2 \
        -n 20 -w 5 -c 1 --json-out torch.json

Collectives as nccl-tests names them; the torch call behind each: all_reduce (in place),
all_gather (all_gather_into_tensor), reduce_scatter (reduce_scatter_tensor), broadcast (in
place), reduce (in place), alltoall (all_to_all_single), gather, scatter, sendrecv
(batch_isend_irecv to rank+1, from rank-1). Each placement torch has is timed like nccl-tests:
warm-up, barrier, `n` calls back to back, one synchronize, elapsed / n; the slowest rank's time
is reported. Sizes are the whole array, as in nccl-tests and oxccl.
"""
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

COLLS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
         "gather", "scatter", "sendrecv"]
DTYPES = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
          "half": torch.float16, "float16": torch.float16, "float": torch.float32,
          "float32": torch.float32, "double": torch.float64, "float64": torch.float64,
          "bfloat16": torch.bfloat16}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
# nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md).
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
          "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
          "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
IN_PLACE = {"all_reduce", "broadcast", "reduce"}
# "cuda" with NCCL (the measurement); "cpu" with gloo only tries the script where no GPU is.
DEV = "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def parse_bytes(text):
    t = text.strip().removesuffix("iB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:].upper(), 1)
    return int(t[:-1] if mult > 1 else t) * mult


def args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("colls", nargs="*", default=["all_reduce"], choices=COLLS + ["all"])
    p.add_argument("-b", "--minbytes", type=parse_bytes, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_bytes, default=128 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPES))
    p.add_argument("-o", "--op", default="sum", choices=sorted(OPS))
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("-c", "--check", type=int, default=0, choices=[0, 1])
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--json-out", help="also write the JSON report here")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu runs gloo on host memory: a dry run of the script, not a measurement")
    a = p.parse_args()
    if "all" in a.colls:
        a.colls = COLLS
    if a.stepfactor < 2:
        p.error("-f wants 2 or more")
    return a


class Case:
    """Buffers and the call of one collective at one size, on this rank."""

    def __init__(self, coll, count, dtype, op, root, rank, n):
        self.coll, self.op, self.root, self.rank, self.n = coll, op, root, rank, n
        part = count // n
        self.count = count if coll in ("all_reduce", "broadcast", "reduce", "sendrecv") else part * n
        z = lambda k: torch.zeros(k, dtype=dtype, device=DEV)
        if coll in IN_PLACE or coll == "sendrecv":
            self.send, self.recv = z(self.count), z(self.count)
        elif coll == "all_gather":
            self.send, self.recv = z(part), z(part * n)
        elif coll in ("reduce_scatter",):
            self.send, self.recv = z(part * n), z(part)
        elif coll == "alltoall":
            self.send, self.recv = z(part * n), z(part * n)
        elif coll == "gather":
            self.send = z(part)
            self.recv = [z(part) for _ in range(n)] if rank == root else None
        elif coll == "scatter":
            self.send = [z(part) for _ in range(n)] if rank == root else None
            self.recv = z(part)

    def fill(self):
        """Inputs as oxccl's check makes them: small integers, exact in every type."""
        def vals(k):
            i = torch.arange(k, device=DEV)
            if self.op == dist.ReduceOp.PRODUCT:
                return torch.where((i + self.rank) % self.n == 0, 2, 1)
            return (self.rank + 3 * i) % 4
        t = self.recv if self.coll in IN_PLACE else self.send
        if isinstance(t, list):
            for j, x in enumerate(t):
                x.copy_(vals(len(x) * self.n)[j * len(x):(j + 1) * len(x)])
        elif t is not None:
            t.copy_(vals(t.numel()))

    def call(self):
        c, n, r = self.coll, self.n, self.rank
        if c == "all_reduce":
            dist.all_reduce(self.recv, op=self.op)
        elif c == "broadcast":
            dist.broadcast(self.recv, src=self.root)
        elif c == "reduce":
            dist.reduce(self.recv, dst=self.root, op=self.op)
        elif c == "all_gather":
            dist.all_gather_into_tensor(self.recv, self.send)
        elif c == "reduce_scatter":
            dist.reduce_scatter_tensor(self.recv, self.send, op=self.op)
        elif c == "alltoall":
            dist.all_to_all_single(self.recv, self.send)
        elif c == "gather":
            dist.gather(self.send, self.recv, dst=self.root)
        elif c == "scatter":
            dist.scatter(self.recv, self.send, src=self.root)
        elif c == "sendrecv":
            ops = [dist.P2POp(dist.isend, self.send, (r + 1) % n), dist.P2POp(dist.irecv, self.recv, (r - 1) % n)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

    def wrong(self):
        """Elements of this rank's output that differ from the reference (oxccl's rules)."""
        n, r, root, op = self.n, self.rank, self.root, self.op
        part = self.count // n
        def inp(j, i):
            if op == dist.ReduceOp.PRODUCT:
                return torch.where((i + j) % n == 0, 2.0, 1.0)
            return ((j + 3 * i) % 4).double()
        def red(i):
            xs = torch.stack([inp(j, i) for j in range(n)])
            return {dist.ReduceOp.SUM: xs.sum(0), dist.ReduceOp.PRODUCT: xs.prod(0),
                    dist.ReduceOp.MIN: xs.min(0).values, dist.ReduceOp.MAX: xs.max(0).values,
                    dist.ReduceOp.AVG: xs.mean(0)}[op]
        c = self.coll
        if c == "reduce" and r != root or c == "gather" and r != root:
            return 0
        got = torch.cat(self.recv) if isinstance(self.recv, list) else self.recv
        i = torch.arange(got.numel(), device=DEV)
        want = {
            "all_reduce": lambda: red(i), "reduce": lambda: red(i),
            "broadcast": lambda: inp(root, i),
            "all_gather": lambda: inp(i // part, i % part), "gather": lambda: inp(i // part, i % part),
            "reduce_scatter": lambda: red(r * part + i),
            "alltoall": lambda: inp(i // part, r * part + i % part),
            "scatter": lambda: inp(root, r * part + i),
            "sendrecv": lambda: inp((r - 1) % n, i),
        }[c]()
        if op == dist.ReduceOp.AVG and not got.is_floating_point():
            want = want.trunc()
        tol = {torch.float16: 0.02, torch.bfloat16: 0.02, torch.float32: 1e-5, torch.float64: 1e-12}.get(got.dtype, 0.0)
        want = want.to(got.dtype).double()
        return int(((got.double() - want).abs() > tol * want.abs().clamp(min=1.0)).sum())


def main():
    global DEV
    a = args()
    DEV = a.device
    dist.init_process_group("nccl" if DEV == "cuda" else "gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    if DEV == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dtype, op = DTYPES[a.datatype], OPS[a.op]
    elem = torch.tensor([], dtype=dtype).element_size()
    sizes, s = [], a.minbytes
    while s <= a.maxbytes:
        sizes.append(s)
        s *= a.stepfactor
    rows = []
    for coll in a.colls:
        for size in sizes:
            case = Case(coll, size // elem, dtype, op, a.root, rank, n)
            for _ in range(a.warmup_iters):
                case.call()
            sync()
            dist.barrier()
            sync()
            t = time.perf_counter()
            for _ in range(a.iters):
                case.call()
            sync()
            secs = torch.tensor([(time.perf_counter() - t) / a.iters], device=DEV, dtype=torch.float64)
            wrong = -1
            if a.check:
                case.fill()
                case.call()
                sync()
                w = torch.tensor([case.wrong()], device=DEV, dtype=torch.float64)
                dist.all_reduce(w)
                wrong = int(w.item())
            dist.all_reduce(secs, op=dist.ReduceOp.MAX)
            secs = secs.item()
            nbytes = case.count * elem
            alg = nbytes / secs / 1e9 if secs > 0 else 0.0
            cell = {"time_us": secs * 1e6, "algbw_gbps": alg, "busbw_gbps": alg * FACTOR[coll](n),
                    "wrong": None if wrong < 0 else wrong}
            rows.append({"layer": "torch", "collective": coll, "size": nbytes, "count": case.count,
                         "type": a.datatype, "redop": a.op if coll in ("all_reduce", "reduce_scatter", "reduce") else "none",
                         "root": a.root if coll in ("broadcast", "reduce", "gather", "scatter") else None,
                         "out_of_place": None if coll in IN_PLACE else cell,
                         "in_place": cell if coll in IN_PLACE else None})
    if rank == 0:
        report(a, rows, n)
    dist.destroy_process_group()


def report(a, rows, n):
    cells = [c for r in rows for c in (r["out_of_place"], r["in_place"]) if c]
    avg = sum(c["busbw_gbps"] for c in cells) / max(len(cells), 1)
    wrong = sum(c["wrong"] or 0 for c in cells)
    lib = f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}" if DEV == "cuda" else "gloo on the CPU (a dry run)"
    first = f"torch.distributed {torch.__version__}, {lib}: {n} ranks, one process per GPU"
    doc = {"backend": "torch", "ranks": n, "first_line": first, "dtype": a.datatype, "redop": a.op,
           "root": a.root, "iters": a.iters, "warmup": a.warmup_iters, "check": bool(a.check),
           "layers": ["torch"], "results": rows, "avg_busbw_gbps": {"torch": avg}, "wrong_total": wrong}
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(doc, f, indent=2)
    if a.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
        return
    print(f"# {first}")
    print("#                                                              out-of-place                       in-place")
    print("#  layer  collective        size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
    print("#                            (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)")
    for r in rows:
        root = -1 if r["root"] is None else r["root"]
        line = f"{'torch':>8}  {r['collective']:<14} {r['size']:>10}  {r['count']:>12}  {r['type']:>8}  {r['redop']:>6}  {root:>6}"
        for c in (r["out_of_place"], r["in_place"]):
            if c is None:
                line += f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>5}"
            else:
                w = "N/A" if c["wrong"] is None else str(c["wrong"])
                line += f"  {c['time_us']:>7.2f}  {c['algbw_gbps']:>6.2f}  {c['busbw_gbps']:>6.2f}  {w:>5}"
        print(line)
    print(f"# Avg bus bandwidth (torch) : {avg:.4f} GB/s")
    print(f"# wrong elements: {wrong}{'' if a.check else ' (results not checked: -c 1 checks)'}")


if __name__ == "__main__":
    main()
