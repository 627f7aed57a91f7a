"""SVG charts of a sweep with every tool side by side (x2_report.py sweep writes them).

    chart(title, series, path)

`series`: {name: [(size_bytes, time_us, busbw_gbps or None), ...]}. Two panels: bus bandwidth
and time against the message size, log axes, one labelled line per series (raw, comm, pg,
nccl-tests, torch), a legend. No third-party module: plain SVG text.
"""
import math

COLORS = {
    "raw": "#1f77b4",
    "comm": "#ff7f0e",
    "pg": "#2ca02c",
    "nccl-tests": "#d62728",
    "torch": "#9467bd",
    "nccl-tests -R 2": "#8c564b",
}
W, H, PAD, GAP = 460, 320, 56, 40


def _size_label(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return f"{b}B"


def _panel(x0, title, ylabel, pts, xr, yr):
    """SVG of one panel at x offset x0: axes, ticks, lines; pts {name: [(x, y)]}."""
    (lx0, lx1), (ly0, ly1) = xr, yr
    px = lambda x: x0 + PAD + (math.log2(x) - lx0) / max(lx1 - lx0, 1e-9) * (W - 2 * PAD)
    py = lambda y: H - PAD - (math.log10(y) - ly0) / max(ly1 - ly0, 1e-9) * (H - 2 * PAD)
    out = [
        f'<text x="{x0 + W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
        f'<line x1="{x0 + PAD}" y1="{H - PAD}" x2="{x0 + W - PAD}" y2="{H - PAD}" stroke="black"/>',
        f'<line x1="{x0 + PAD}" y1="{PAD}" x2="{x0 + PAD}" y2="{H - PAD}" stroke="black"/>',
        f'<text x="{x0 + W / 2}" y="{H - 12}" text-anchor="middle" font-size="11">message size</text>',
        f'<text x="{x0 + 14}" y="{H / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 {x0 + 14} {H / 2})">{ylabel}</text>',
    ]
    for e in range(math.ceil(lx0), math.floor(lx1) + 1, 5):
        x = px(2 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{H - PAD}" x2="{x:.1f}" y2="{H - PAD + 4}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{H - PAD + 16}" text-anchor="middle" font-size="10">{_size_label(2 ** e)}</text>')
    for e in range(math.ceil(ly0), math.floor(ly1) + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{x0 + PAD - 4}" y1="{y:.1f}" x2="{x0 + W - PAD}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 + PAD - 6}" y="{y + 3:.1f}" text-anchor="end" font-size="10">{10.0 ** e:g}</text>')
    for name, p in pts.items():
        if len(p) < 1:
            continue
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in p)
        color = COLORS.get(name, "black")
        out.append(f'<polyline class="series" data-series="{name}" fill="none" stroke="{color}" '
                   f'stroke-width="1.5" points="{d}"/>')
    return out


def _range(vals, log):
    lo, hi = min(vals), max(vals)
    a, b = log(lo), log(hi)
    return (math.floor(a), math.ceil(b)) if b > a else (math.floor(a) - 1, math.ceil(b) + 1)


def chart(title, series, path):
    """Writes the chart of `series` to `path`; returns the names of the series drawn."""
    # A size of 0 (a part rounded to nothing, as nccl-tests' 4-rank gathers at 8 B) has no
    # place on a log axis.
    series = {n: [p for p in v if p[0] > 0] for n, v in series.items()}
    bw = {n: [(s, b) for s, _, b in v if b and b > 0] for n, v in series.items()}
    tm = {n: [(s, t) for s, t, _ in v if t and t > 0] for n, v in series.items()}
    sizes = [s for v in series.values() for s, _, _ in v]
    if not sizes:
        return []
    xr = (math.log2(min(sizes)), math.log2(max(sizes)))
    if xr[1] <= xr[0]:
        xr = (xr[0] - 1, xr[1] + 1)
    bvals = [y for v in bw.values() for _, y in v] or [1.0]
    tvals = [y for v in tm.values() for _, y in v] or [1.0]
    body = _panel(0, f"{title}: bus bandwidth", "busbw (GB/s)", bw, xr, _range(bvals, math.log10))
    body += _panel(W, f"{title}: time", "time (µs)", tm, xr, _range(tvals, math.log10))
    drawn = [n for n in series if bw.get(n) or tm.get(n)]
    for i, n in enumerate(drawn):
        x = 2 * W - 120
        y = PAD + 16 * i
        body.append(f'<line x1="{x}" y1="{y}" x2="{x + 18}" y2="{y}" stroke="{COLORS.get(n, "black")}" stroke-width="2"/>')
        body.append(f'<text x="{x + 22}" y="{y + 4}" font-size="11">{n}</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" '
           f'viewBox="0 0 {2 * W} {H}" font-family="sans-serif">\n'
           f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")
    with open(path, "w") as f:
        f.write(svg)
    return drawn


if __name__ == "__main__":
    # A self-check: five series drawn, parsable, one polyline per series.
    import tempfile
    import xml.etree.ElementTree as ET
    pts = [(8 << k, 5.0 + k, 0.001 * 8 ** k) for k in range(9)]
    s = {n: [(a, t * (1 + i / 10), b) for a, t, b in pts] for i, n in enumerate(COLORS)}
    p = tempfile.mktemp(suffix=".svg")
    drawn = chart("all_reduce", s, p)
    lines = [e for e in ET.parse(p).iter() if e.tag.endswith("polyline")]
    assert drawn == list(COLORS), drawn
    assert len(lines) == 2 * len(COLORS), len(lines)
    assert {e.get("data-series") for e in lines} == set(COLORS)
    print(f"x2_chart: ok ({p})")
