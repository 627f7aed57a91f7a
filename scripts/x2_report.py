"""Tables and goal checks of the 2-GPU plan (scripts/gpu-x2.sh), from the files its items wrote.

    x2_report.py overhead RUN.md...   pg_overhead's tables: pg vs Comm, watchdog + recorder
    x2_report.py sweep DIR N          oxccl raw/comm/pg, nccl-tests, torch: 8 B - 1 GiB (tables,
                                      and DIR/chart_<collective>.svg with the five side by side)
    x2_report.py graphs DIR           -G 10 with -R 0 / -R 2, and -R 2 alone: oxccl and nccl-tests
    x2_report.py tune DIR             the pg layer under `oxccl tune`'s table vs nccl-tests' best -R

Each writes markdown tables (DIR/*.md, or stdout) and ends with a `NOTE: ...` line for the
summary. Exit status: 0 every goal met, 3 a goal missed, 1 the inputs are missing or broken.
Where a tool ran more than once (rounds), the fastest round counts, for every tool alike.
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from x2_chart import chart  # noqa: E402

MISS, BROKEN = 3, 1


def human(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return str(size)


PLACES = ("in_place", "out_of_place")


def place_of(rec):
    """{placement: (time_us, busbw, wrong)} of a result record, the placements it has."""
    out = {}
    for k in PLACES:
        x = rec.get(k)
        if x and x.get("time_us") is not None:
            out[k] = (x["time_us"], x.get("busbw_gbps"), x.get("wrong", 0))
    return out


def oxccl_json(path):
    """{(layer, collective, size): {placement: (time, busbw, wrong)}} of an `oxccl perf
    --json-out` (or torch_baseline.py) file."""
    out = {}
    try:
        doc = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"cannot read {path}: {e}")
        return out
    for r in doc.get("results", []):
        p = place_of(r)
        if p:
            out[(r["layer"], r["collective"], r["size"])] = p
    return out


def nccl_tests(path):
    """{size: {placement: (time, busbw, wrong)}} of nccl-tests' text output."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        print(f"cannot read {path}: {e}")
        return out
    def num(x):
        try:
            return float(x)
        except ValueError:
            return None
    for line in lines:
        f = line.split()
        if len(f) < 13 or line.lstrip().startswith("#") or not f[0].isdigit():
            continue
        row = {}
        for k, (t, bw, w) in (("out_of_place", (5, 7, 8)), ("in_place", (9, 11, 12))):
            if num(f[t]) is not None:
                row[k] = (num(f[t]), num(f[bw]), num(f[w]))
        out[int(f[0])] = row
    return out


def best(*tables):
    """The fastest entry per key and placement over several runs' tables."""
    out = {}
    for t in tables:
        for k, row in t.items():
            cur = out.setdefault(k, {})
            for p, v in row.items():
                if v[0] is not None and (p not in cur or v[0] < cur[p][0]):
                    cur[p] = v
    return out


def subject_place(row):
    """The placement a row of the subject (oxccl's pg layer) is compared in: in place where
    it has one (as the tools time it for all_reduce and broadcast), else out of place."""
    return "in_place" if row and "in_place" in row else "out_of_place"


def at(row, place):
    """(time, busbw, wrong) of `row` in `place`, else in the other placement; None if none."""
    if not row:
        return None
    return row.get(place) or next(iter(row.values()), None)


def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


def overhead(paths):
    if not paths:
        print("NOTE: overhead: expected one or more bench output files, got none")
        return BROKEN
    rows_by_run = []
    for p in paths:
        rows = []
        try:
            lines = open(p).read().splitlines()
        except OSError as e:
            print(f"NOTE: cannot read {p}: {e}")
            return BROKEN
        for line in lines:
            m = re.match(r"\| (.+?) \| (\d+) \| (\d+) \| row (\d+) \| ([+-]\d+) \|", line)
            if m:
                rows.append((m.group(1), int(m.group(2)), int(m.group(5))))
        if len(rows) < 7:
            print(f"NOTE: {os.path.basename(p)}: {len(rows)} rows, expected 7 (the bench failed?)")
            return BROKEN
        if rows[3][1] == 0:
            print(f"NOTE: {os.path.basename(p)}: Comm's latency (row 3) is 0 ns, expected a measurement")
            return BROKEN
        rows_by_run.append(rows)
    notes, missed = [], False
    for i, rows in enumerate(rows_by_run, 1):
        pg_issue = rows[1][2]
        ratio = rows[4][1] / rows[3][1]
        wd_issue, wd_latency = rows[2][2], rows[5][2]
        nb = (f", pg on NcclBuf-Comm issue {rows[7][2]:+d} ns (with watchdog+recorder "
              f"{rows[7][2] + rows[8][2]:+d})") if len(rows) >= 9 else ""
        notes.append(f"run {i}: pg-Comm issue {pg_issue:+d} ns, latency pg/Comm {ratio:.3f}x "
                     f"(Comm {rows[3][1]} ns), watchdog+recorder issue {wd_issue:+d} ns / latency {wd_latency:+d} ns{nb}")
    mean = lambda k, j: sum(r[k][j] for r in rows_by_run) / len(rows_by_run)
    goals = [("pg - Comm <= 1000 ns", mean(1, 2) <= 1000),
             ("latency <= 1.05x", mean(4, 1) / mean(3, 1) <= 1.05),
             ("watchdog + recorder <= 500 ns", mean(2, 2) <= 500)]
    missed = [g for g, ok in goals if not ok]
    print("\n".join(notes))
    print(f"NOTE: {'; '.join(notes)}; mean of runs: {'every goal met' if not missed else 'MISSED ' + ', '.join(missed)}")
    return MISS if missed else 0


def sweep(d, n):
    colls = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"]
    ox = best(*[oxccl_json(p) for p in sorted(glob.glob(f"{d}/oxccl_*.r?.json"))
                if re.search(r"oxccl_[a-z_]+\.r\d\.json$", p)])
    tt = best(*[oxccl_json(p) for p in sorted(glob.glob(f"{d}/torch.r?.json"))])
    if not ox:
        print("NOTE: no oxccl results (oxccl_<collective>.r<round>.json)")
        return BROKEN
    md, notes, missed = [], [], []
    worst_comm = (0.0, "")
    for c in colls:
        nt = best(*[nccl_tests(p) for p in sorted(glob.glob(f"{d}/nccl-tests_{c}.r?.txt"))])
        sizes = sorted({k[2] for k in ox if k[1] == c})
        if not sizes:
            notes.append(f"{c}: no oxccl rows")
            missed.append(c)
            continue
        md.append(f"\n### {c} ({n} GPUs): time µs (busbw GB/s), fastest of the rounds, "
                  "in place where the pg layer has it, else out of place\n")
        md.append("| size | raw | comm | pg | nccl-tests -t N -g 1 | torch | comm/raw | pg/comm |")
        md.append("|---|---|---|---|---|---|---|---|")
        lines = {k: [] for k in ("raw", "comm", "pg", "nccl-tests", "torch")}
        for s in sizes:
            place = subject_place(ox.get(("pg", c, s)))
            g = lambda layer: at(ox.get((layer, c, s)), place)
            raw, comm, pg = g("raw"), g("comm"), g("pg")
            t = at(tt.get(("torch", c, s)), place)
            ntv = at(nt.get(s), place)
            for name, v in (("raw", raw), ("comm", comm), ("pg", pg), ("nccl-tests", ntv), ("torch", t)):
                if v:
                    lines[name].append((s, v[0], v[1]))
            cell = lambda v: "–" if not v else f"{v[0]:.2f} ({fmt(v[1])})"
            r1 = comm[0] / raw[0] if raw and comm else None
            r2 = pg[0] / comm[0] if pg and comm else None
            if r1 and r1 > worst_comm[0]:
                worst_comm = (r1, f"{c} {human(s)}")
            md.append(f"| {human(s)} | {cell(raw)} | {cell(comm)} | {cell(pg)} | {cell(ntv)} | {cell(t)} | {fmt(r1, '.3f')} | {fmt(r2, '.3f')} |")
            if s >= 128 << 20 and ntv and ntv[1]:
                for layer, v in (("comm", comm), ("pg", pg)):
                    if v and v[1] is not None and v[1] < 0.99 * ntv[1]:
                        missed.append(f"{c} {human(s)} {layer} busbw {v[1]:.0f} < 99% of {ntv[1]:.0f}")
        drawn = chart(f"{c} ({n} GPUs)", {k: v for k, v in lines.items() if v}, f"{d}/chart_{c}.svg")
        notes.append(f"{c}: chart of {', '.join(drawn)}")
        for layer in ("raw", "comm", "pg"):
            if not any(k[0] == layer and k[1] == c for k in ox):
                missed.append(f"{c}: no {layer} layer")
        if not nt:
            missed.append(f"{c}: no nccl-tests rows")
        if not any(k[1] == c for k in tt):
            missed.append(f"{c}: no torch rows")
        wrong = sum(v[2] or 0 for k, row in ox.items() if k[1] == c for v in row.values())
        notes.append(f"{c}: wrong {wrong}")
        if wrong:
            missed.append(f"{c} wrong elements {wrong}")
    comm_miss = worst_comm[0] > 1.02
    if comm_miss:
        missed.append(f"comm/raw worst {worst_comm[0]:.3f} at {worst_comm[1]}")
    ar8 = (at(ox.get(("pg", "all_reduce", 8)), "in_place"), at(ox.get(("comm", "all_reduce", 8)), "in_place"))
    if all(ar8):
        ratio = ar8[0][0] / ar8[1][0]
        notes.append(f"all_reduce 8 B pg {ar8[0][0]:.2f} / comm {ar8[1][0]:.2f} us = {ratio:.3f}x")
        if ratio > 1.05:
            missed.append(f"pg 8 B {ratio:.3f}x comm")
    open(f"{d}/tables.md", "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"NOTE: worst comm/raw {worst_comm[0]:.3f} ({worst_comm[1]}); {'; '.join(notes)}; "
          f"{'every goal met' if not missed else 'MISSED: ' + '; '.join(missed[:6])}; tables in {os.path.basename(d)}/tables.md")
    return MISS if missed else 0


def graphs(d):
    md, notes, missed = [], [], []
    for c in ["all_reduce", "all_gather"]:
        md.append(f"\n### {c}: time µs, fastest of the rounds (graphs: 20 ops per launch)\n")
        md.append("| size | mode | raw | comm | pg | nccl-tests |")
        md.append("|---|---|---|---|---|---|")
        per = {}
        for tag in ["R2G10", "R0G10", "R2G0"]:
            ox = best(*[oxccl_json(p) for p in glob.glob(f"{d}/oxccl_{c}_{tag}.r?.json")])
            nt = best(*[nccl_tests(p) for p in glob.glob(f"{d}/nccl-tests_{c}_{tag}.r?.txt")])
            per[tag] = (ox, nt)
        sizes = sorted({k[2] for ox, _ in per.values() for k in ox})
        for s in sizes:
            for tag, (ox, nt) in per.items():
                place = subject_place(ox.get(("pg", c, s)))
                v = lambda row: fmt((at(row, place) or (None,))[0])
                md.append(f"| {human(s)} | {tag} | {v(ox.get(('raw', c, s)))} | {v(ox.get(('comm', c, s)))} | "
                          f"{v(ox.get(('pg', c, s)))} | {v(nt.get(s))} |")
        ox, nt = per["R2G10"]
        pg8 = at(ox.get(("pg", c, 8)), "in_place")
        if c == "all_reduce":
            if pg8:
                notes.append(f"pg all_reduce 8 B with -R 2 -G 10: {pg8[0]:.2f} us (nccl-tests {fmt((at(nt.get(8), 'in_place') or (None,))[0])})")
                if pg8[0] > 4.0:
                    missed.append("pg 8 B all_reduce > 4 us")
            else:
                missed.append("no pg 8 B all_reduce with -R 2 -G 10")
        wrong = sum(v[2] or 0 for ox, _ in per.values() for row in ox.values() for v in row.values())
        if wrong:
            missed.append(f"{c}: {wrong} wrong")
    open(f"{d}/tables.md", "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"NOTE: {'; '.join(notes)}; {'goal met' if not missed else 'MISSED: ' + '; '.join(missed)}")
    return MISS if missed else 0


def tune(d):
    tuned = best(*[oxccl_json(p) for p in glob.glob(f"{d}/oxccl_tuned.r?.json")])
    if not tuned:
        print("NOTE: no --tuned results (oxccl_tuned.r<round>.json)")
        return BROKEN
    md = ["| collective | size | pg tuned µs | nccl-tests -R 0 / 1 / 2 µs | tuned / best |", "|---|---|---|---|---|"]
    ratios, unmatched = [], []
    for (layer, c, s), row in sorted(tuned.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        place = subject_place(row)
        v = row[place]
        modes = [at(best(*[nccl_tests(p) for p in glob.glob(f"{d}/nccl-tests_{c}_R{r}.r?.txt")]).get(s), place)
                 for r in range(3)]
        times = [m[0] for m in modes if m and m[0] is not None]
        if not times:
            # nccl-tests has no row of that size (it rounds the smallest sizes of the
            # collectives that split a buffer per rank down to 0 B) or did not run.
            unmatched.append(f"{c} {human(s)}")
            continue
        ratio = v[0] / min(times)
        ratios.append((ratio, f"{c} {human(s)}"))
        md.append(f"| {c} | {human(s)} {place.replace('_', ' ')} | {v[0]:.2f} | {' / '.join(fmt(m[0] if m else None) for m in modes)} | {ratio:.3f} |")
    if not ratios:
        print(f"NOTE: no nccl-tests results to compare with ({len(unmatched)} tuned points; nccl-tests_<c>_R<r>.r<round>.txt)")
        return BROKEN
    open(f"{d}/tables.md", "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    worst = max(ratios)
    at1 = sum(r <= 1.0 for r, _ in ratios)
    at5 = sum(r <= 1.05 for r, _ in ratios)
    print(f"NOTE: pg under the tune table at least as fast as nccl-tests' best -R at {at1} of {len(ratios)} points, "
          f"within 5% at {at5}; worst {worst[0]:.3f}x ({worst[1]})"
          + (f"; {len(unmatched)} without a nccl-tests row: {', '.join(unmatched[:6])}" if unmatched else ""))
    return MISS if at5 < len(ratios) else 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    what, args = argv[1], argv[2:]
    if what == "overhead":
        return overhead(args)
    if what == "sweep":
        if len(args) != 2 or not args[1].isdigit():
            print("sweep: expected DIR and N (the number of runs, a whole number)")
            return 2
        return sweep(args[0], int(args[1]))
    if what in ("graphs", "tune") and len(args) != 1:
        print(f"{what}: expected DIR")
        return 2
    if what == "graphs":
        return graphs(args[0])
    if what == "tune":
        return tune(args[0])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
