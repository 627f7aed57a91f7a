"""Summarises `scripts/gpu-pg-ab.sh`'s perf lines ("build round layer bytes out-of-place
in-place"): per build and size, the medians over rounds of comm, pg, pg - comm (with its
range) and pg / comm, in-place times in us."""
import statistics
import sys
from collections import defaultdict


def main(path):
    times = {}
    for line in open(path):
        f = line.split()
        if len(f) < 6 or f[2] not in ("raw", "comm", "pg"):
            continue
        try:
            times[(f[0], f[1], int(f[3]), f[2])] = float(f[5])
        except ValueError:
            continue
    builds = sorted({k[0] for k in times})
    sizes = sorted({k[2] for k in times})
    rounds = sorted({k[1] for k in times})
    for b in builds:
        print(b)
        for s in sizes:
            rows = []
            for r in rounds:
                c, g = times.get((b, r, s, "comm")), times.get((b, r, s, "pg"))
                if c and g:
                    rows.append((c, g, g - c, g / c))
            if not rows:
                continue
            med = [statistics.median(x[i] for x in rows) for i in range(4)]
            lo, hi = min(x[2] for x in rows), max(x[2] for x in rows)
            print(f"  {s:>8} B  comm {med[0]:6.2f}  pg {med[1]:6.2f}  pg-comm {med[2]:+5.2f} "
                  f"[{lo:+5.2f}, {hi:+5.2f}]  pg/comm {med[3]:.3f}  ({len(rows)} rounds)")


if __name__ == "__main__":
    main(sys.argv[1])
