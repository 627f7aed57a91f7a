#!/usr/bin/env python3
"""Charts of oxccl's all-reduce kernels against NCCL from one `scripts/gpu-peer.sh` run.

    python3 scripts/peer_chart.py RESULTS_DIR OUT_DIR [PREFIX]

RESULTS_DIR: the unpacked results.tar.gz of parts `perf` and `graphs` (perf-N-auto.json,
perf-N-nccl.json, graph-N-*.json, perf.log and graphs.log with nccl-tests' output). Writes
OUT_DIR/PREFIX-eager-N.svg and PREFIX-graph-N.svg per group size: time and bus bandwidth of
`Comm` on the kernels, NCCL through the loaded pointer, and nccl-tests with plain memory and
with symmetric windows, all from the same run.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from x2_chart import chart  # noqa: E402


def oxccl(path, layer):
    """[(size, time_us, busbw)] of `layer` in an oxccl perf JSON (the faster placement)."""
    if not os.path.exists(path):
        return []
    out = []
    for r in json.load(open(path))["results"]:
        if r["layer"] != layer:
            continue
        best = None
        for p in (r.get("out_of_place"), r.get("in_place")):
            if p and isinstance(p.get("time_us"), (int, float)) and (best is None or p["time_us"] < best[0]):
                best = (p["time_us"], p.get("busbw_gbps"))
        if best:
            out.append((r["size"], best[0], best[1]))
    return out


def nccl_tests(log, header):
    """[(size, time_us, busbw)] of the nccl-tests block after the line `header` in `log`."""
    if not os.path.exists(log):
        return []
    out, on = [], False
    row = re.compile(r"\s+(\d+)\s+\d+\s+float\s+(?:sum|none)\s+-1\s+([\d.]+)\s+\S+\s+([\d.]+)\s+\S+\s+([\d.]+)\s+\S+\s+([\d.]+)")
    for line in open(log):
        if line.startswith("== "):
            on = line.strip() == header
            continue
        m = on and row.match(line)
        if m:
            size, t1, b1, t2, b2 = m.groups()
            t, b = min((float(t1), float(b1)), (float(t2), float(b2)))
            out.append((int(size), t, b))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    res, out = sys.argv[1], sys.argv[2]
    prefix = sys.argv[3] if len(sys.argv) > 3 else "peer-kernels"
    os.makedirs(out, exist_ok=True)
    written = []
    for n in range(2, 9):
        for kind, tag, extra in (("eager", "perf", ""), ("graph", "graph", " -G 20")):
            args = "-n 500 -w 50" if kind == "eager" else "-n 20 -w 5 -G 20"
            log = os.path.join(res, "perf.log" if kind == "eager" else "graphs.log")
            series = {
                "comm": oxccl(os.path.join(res, f"{tag}-{n}-auto.json"), "comm"),
                "raw": oxccl(os.path.join(res, f"{tag}-{n}-auto.json"), "raw"),
                "nccl-tests": nccl_tests(log, f"== nccl-tests -t {n} -g 1 -R 0{extra}")
                or nccl_tests(log, f"== nccl-tests -t {n} -g 1 -R 0 {args}"),
                "nccl-tests -R 2": nccl_tests(log, f"== nccl-tests -t {n} -g 1 -R 2{extra}")
                or nccl_tests(log, f"== nccl-tests -t {n} -g 1 -R 2 {args}"),
            }
            series = {k: v for k, v in series.items() if v}
            if "comm" not in series:
                continue
            path = os.path.join(out, f"{prefix}-{kind}-{n}.svg")
            chart(f"all_reduce, {n} GPUs, {kind} (comm: oxccl's kernels)", series, path)
            written.append(path)
    print("\n".join(written) or "no runs found")


if __name__ == "__main__":
    main()
