"""Summarises one pg_host row of `scripts/pg-footprint.sh`: from callgrind_annotate's
inclusive and self costs (Ir, D1mr, D1mw) of the issuing thread, one call's instructions and
L1d misses, and the functions that miss.

    python3 scripts/pg_footprint.py INCLUSIVE_TXT SELF_TXT ROW
"""
import re
import sys

# pg_host's calls: 5 warm-up rounds and the script's 10, 200 calls each.
CALLS = (5 + 10) * 200
# Not the call's own: the eviction between calls, and the ring making room (valgrind runs one
# thread at a time, so the watchdog falls behind and the issuing thread makes room itself,
# which it does not do with a core to spare).
AROUND = ("pg_host::evict", "WorkRing<E,A>::make_room")


def costs(path):
    for line in open(path):
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+([\d,.]+)(?: \([^)]*\))?\s+([\d,.]+)(?: \([^)]*\))?\s+(\S.*)", line)
        if m:
            vals = [int(g.replace(",", "")) if g.replace(",", "").isdigit() else 0 for g in m.groups()[:3]]
            yield m.group(4), vals


def first(path, key):
    return next((v for name, v in costs(path) if key in name), [0, 0, 0])


def short(name):
    name = re.sub(r" \[.*\]$", "", name)
    name = re.sub(r"^[^:]*\.(rs|c|S|h):", "", name)  # the source file callgrind names
    while re.search(r"<[^<>]*>", name):
        name = re.sub(r"<[^<>]*>", "", name)
    return name[:80]


def main(incl, self_, row):
    loop = first(incl, "pg_host::issue_rounds")
    around = [first(incl, k) for k in AROUND]
    ir, rd, wr = ((loop[i] - sum(a[i] for a in around)) / CALLS for i in range(3))
    print(f"row {row}: {ir:.0f} instructions, {rd + wr:.1f} lines missed "
          f"({rd:.1f} read, {wr:.1f} written first) per call")
    # The eviction's own loop is inlined into the thread-local access it makes.
    skip = AROUND + ("PROGRAM TOTALS", "LocalKey<T>::with")
    by_fn = {}
    for n, v in costs(self_):
        if not any(k in n for k in skip):
            by_fn[short(n)] = by_fn.get(short(n), 0) + v[1] + v[2]
    for name, misses in sorted(by_fn.items(), key=lambda kv: -kv[1]):
        if misses / CALLS >= 0.5:
            print(f"  {misses / CALLS:5.1f}  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
