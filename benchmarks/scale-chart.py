#!/usr/bin/env python3
"""Draw benchmarks/scale.sh's JSON as an SVG chart: resident memory (idle and
after the 1 % writes) and idle CPU (% of one core) against the volume's size
in extents, log-scale x, one panel above the other. Several runs (before and
after a change) go on one chart, each with its label.

Usage: benchmarks/scale-chart.py RUN.json[=LABEL] [RUN.json[=LABEL] ...]
           [-o docs/img/scale.svg]

No plotting library: the SVG is written by hand (standard library only).
"""

import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
WIDTH, PANEL_H = 640, 220
LEFT, RIGHT, TOP, GAP, BOTTOM = 70, 230, 40, 70, 50


def nice_step(top, ticks=5):
    """A step of 1, 2 or 5 x 10^k giving about `ticks` ticks up to `top`."""
    if top <= 0:
        return 1.0
    raw = top / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def label_extents(n):
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def fmt_tick(v, step):
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{v:.{decimals}f}"


def load(arg):
    path, _, label = arg.partition("=")
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"scale-chart: cannot read {path}: {e}")
    if not run.get("sizes"):
        sys.exit(f"scale-chart: {path} has no sizes (is it scale.sh --json output?)")
    return label or run.get("tierd", path), run["sizes"]


def panel(out, y0, title, unit, series, xs_all):
    """One panel at vertical offset y0: series is [(name, colour, dash, [(x, y)])]."""
    plot_w = WIDTH - LEFT - RIGHT
    ymax = max((y for _, _, _, pts in series for _, y in pts), default=1) or 1
    step = nice_step(ymax)
    top = math.ceil(ymax / step) * step
    lx = [math.log2(x) for x in xs_all]
    lo, hi = min(lx), max(lx)
    if hi == lo:
        lo, hi = lo - 1, hi + 1

    def px(x):
        return LEFT + (math.log2(x) - lo) / (hi - lo) * plot_w

    def py(y):
        return y0 + PANEL_H - y / top * PANEL_H

    out.append(f'<text x="{LEFT}" y="{y0 - 12}" font-weight="bold">{escape(title)}</text>')
    v = 0.0
    while v <= top + step / 2:
        y = py(v)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_tick(v, step)}</text>')
        v += step
    out.append(
        f'<text x="{LEFT - 50}" y="{y0 + PANEL_H / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 {LEFT - 50} {y0 + PANEL_H / 2:.1f})">{escape(unit)}</text>'
    )
    for x in sorted(set(xs_all)):
        out.append(f'<line x1="{px(x):.1f}" y1="{y0}" x2="{px(x):.1f}" y2="{y0 + PANEL_H}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{y0 + PANEL_H + 16}" text-anchor="middle">{label_extents(x)}</text>')
    out.append(
        f'<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#444"/>'
    )
    for i, (name, colour, dash, pts) in enumerate(series):
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        dash_attr = ' stroke-dasharray="6 4"' if dash else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = y0 + 10 + i * 18
        lx0 = LEFT + plot_w + 14
        out.append(
            f'<line x1="{lx0}" y1="{ly}" x2="{lx0 + 22}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash_attr}/>'
        )
        out.append(f'<text x="{lx0 + 28}" y="{ly + 4}">{escape(name)}</text>')


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="scale.sh --json files, each optionally =LABEL")
    ap.add_argument("-o", "--output", default="docs/img/scale.svg")
    args = ap.parse_args()
    runs = [load(a) for a in args.runs]
    mem, cpu, xs = [], [], []
    for i, (label, sizes) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        idle = [(s["extents"], s["memory"]["rss_idle_bytes"] / 2**20) for s in sizes]
        after = [(s["extents"], s["memory"]["rss_after_writes_bytes"] / 2**20) for s in sizes]
        mem.append((f"{label}: idle", colour, False, idle))
        mem.append((f"{label}: after 1 % writes", colour, True, after))
        cpu.append((f"{label}: idle", colour, False, [(s["extents"], s["idle"]["cpu_percent"]) for s in sizes]))
        xs.extend(s["extents"] for s in sizes)
    height = TOP + 2 * PANEL_H + GAP + BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    panel(out, TOP, "Resident memory against volume size", "MiB", mem, xs)
    panel(out, TOP + PANEL_H + GAP, "Idle CPU against volume size", "% of one core", cpu, xs)
    out.append(
        f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.1f}" y="{height - 12}" '
        f'text-anchor="middle">volume size in 1 MiB extents (log scale)</text>'
    )
    out.append("</svg>")
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")
    except OSError as e:
        sys.exit(f"scale-chart: cannot write {args.output}: {e}")
    print(f"scale-chart: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
