"""bench/plot_fig6.py: a plot like the paper's Figure 6 from bench/fused.sh's
CSV, written as SVG with the Python standard library alone.

    python3 bench/plot_fig6.py OUT/fused.csv [MORE.csv ...] -o fig6.svg

One panel per optimizer x precision (Adam, LAMB x FP32, mixed) that has a
PyTorch baseline: x = log2 N, y = the speedup over the baseline (PyTorch's
all_reduce + optimizer step) of each schedule, and UB, the speedup that NCCL
AllReduce alone would give (baseline time / AllReduce time).
  AR-Opt           the variant AR_Opt
  RS-Opt-AG        the fastest of RS_Opt_AG, RS_Opt_AG_2 ...
  fuse(RS-Opt-AG)  the fastest of fuse_RS_Opt_AG, fuse_RS_Opt_AG_2 ... and
                   "paper" (adam.coco's own schedule, the same fused kernel)
  UB               the baseline over PyTorch's all_reduce of the same
                   gradients (NCCL in the gradients' type); without it, over
                   coconet's AllReduce program of that precision
Only rows whose result is bitwise, rounding, unchecked (timed with no CPU
reference: bench/fused.sh's largest N) or measured count. Several CSVs
(runs) may be given: for each measured thing the fastest is taken. Besides
the SVG, the speedups are printed as CSV: panel,N,series,speedup.

Reads the CSV of bench/fused.sh (tool,program,optimizer,precision,N,variant,
schedule,result,ms), its older form (tool,program,N,variant,result,ms) and
the bare lines of the older PyTorch baseline, torch_adam.py, now
bench/torch_opt.py (torch,PREC,N,AR,BOTH)."""
import argparse
import csv
import math
import re
import sys

SERIES = ("AR-Opt", "RS-Opt-AG", "fuse(RS-Opt-AG)", "UB")
COLORS = {"AR-Opt": "#1f77b4", "RS-Opt-AG": "#2ca02c", "fuse(RS-Opt-AG)": "#d62728",
          "UB": "#7f7f7f"}
PANELS = (("adam", "fp32"), ("adam", "mixed"), ("lamb", "fp32"), ("lamb", "mixed"))
TITLE = {"adam": "Adam", "lamb": "LAMB", "fp32": "FP32", "mixed": "mixed precision"}
GOOD = ("bitwise", "rounding", "unchecked", "measured")
W, H = 380, 280                     # one panel
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 30, 44


def kind_of(program):
    """(optimizer, precision) of an old-format coconet program name."""
    if program.startswith("allreduce"):
        return "allreduce", "fp16" if program.endswith("16") else "fp32"
    if program.endswith("_fp32"):
        return program[:-5], "fp32"
    return program, "mixed"


def rows_of(path):
    """Every row of one CSV file as a dict of the current format."""
    out = []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec or rec[0] == "tool":
                continue
            if len(rec) == 9:
                keys = ("tool", "program", "optimizer", "precision", "N", "variant",
                        "schedule", "result", "ms")
                out.append(dict(zip(keys, rec)))
            elif len(rec) == 6 and rec[0] == "torch":   # torch,adam_PREC,N,variant,result,ms
                opt, prec = rec[1].rsplit("_", 1)
                out.append({"tool": "torch", "program": "torch_" + opt, "optimizer": opt,
                            "precision": prec, "N": rec[2], "variant": rec[3],
                            "schedule": "AllReduce" if rec[3] == "allreduce" else "baseline",
                            "result": rec[4], "ms": rec[5]})
            elif len(rec) == 6:                         # coconet,program,N,variant,result,ms
                opt, prec = kind_of(rec[1])
                out.append({"tool": rec[0], "program": rec[1], "optimizer": opt,
                            "precision": prec, "N": rec[2], "variant": rec[3],
                            "schedule": rec[3], "result": rec[4], "ms": rec[5]})
            elif len(rec) == 5 and rec[0] == "torch":   # torch,PREC,N,AR,BOTH
                for variant, ms in (("allreduce", rec[3]), ("allreduce+fused_adam", rec[4])):
                    out.append({"tool": "torch", "program": "torch_adam", "optimizer": "adam",
                                "precision": rec[1], "N": rec[2], "variant": variant,
                                "schedule": "AllReduce" if variant == "allreduce" else "baseline",
                                "result": "measured", "ms": ms})
            else:
                sys.exit(f"{path}: a row of {len(rec)} fields is of no known format: {rec}")
    return out


def series_of(row):
    """The plotted series a coconet optimizer variant belongs to, or None."""
    v = row["variant"]
    if v == "AR_Opt":
        return "AR-Opt"
    if re.fullmatch(r"RS_Opt_AG(_\d+)?", v):
        return "RS-Opt-AG"
    if re.fullmatch(r"fuse_RS_Opt_AG(_\d+)?", v) or v == "paper":
        return "fuse(RS-Opt-AG)"
    return None


def keep_min(table, key, ms):
    if key not in table or ms < table[key]:
        table[key] = ms


def speedups(rows):
    """{(optimizer, precision): {series: {log2 N: speedup}}}"""
    base, torch_ar, coco_ar, best = {}, {}, {}, {}
    for r in rows:
        if r["result"] not in GOOD or not r["ms"]:
            continue
        ms, n = float(r["ms"]), int(r["N"])
        if ms <= 0:
            continue
        if r["tool"] == "torch":
            key = (r["optimizer"], r["precision"], n)
            keep_min(torch_ar if r["variant"] == "allreduce" else base, key, ms)
        elif r["optimizer"] == "allreduce" and r["variant"] == "program":
            keep_min(coco_ar, ("mixed" if r["precision"] == "fp16" else "fp32", n), ms)
        elif series_of(r):
            keep_min(best, (r["optimizer"], r["precision"], n, series_of(r)), ms)
    out = {}
    for (opt, prec, n), t in base.items():
        panel = out.setdefault((opt, prec), {s: {} for s in SERIES})
        x = math.log2(n)
        for s in SERIES[:3]:
            if (opt, prec, n, s) in best:
                panel[s][x] = t / best[(opt, prec, n, s)]
        ar = torch_ar.get((opt, prec, n), coco_ar.get((prec, n)))
        if ar:
            panel["UB"][x] = t / ar
    return {k: v for k, v in out.items() if any(v[s] for s in SERIES[:3])}


def nice_step(top):
    """A tick step of 1, 2 or 5 x 10^k giving 4 to 10 ticks up to top."""
    raw = top / 5
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def fmt(v):
    return f"{v:.2f}".rstrip("0").rstrip(".")


def panel_svg(opt, prec, data, ox, oy):
    """The SVG elements of one panel whose top left corner is (ox, oy)."""
    xs = sorted({x for s in SERIES for x in data[s]})
    x0, x1 = math.floor(xs[0]), math.ceil(xs[-1])
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    top = max(max(d.values()) for d in data.values() if d)
    top = max(top, 1.0) * 1.1
    step = nice_step(top)
    top = math.ceil(top / step) * step
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return ox + LEFT + (x - x0) / (x1 - x0) * pw

    def py(y):
        return oy + TOP + ph - y / top * ph

    name = f"{opt}-{prec}"
    e = [f'<g class="panel" id="panel-{name}" data-optimizer="{opt}" data-precision="{prec}">',
         f'<text x="{ox + LEFT + pw / 2:.1f}" y="{oy + 18}" text-anchor="middle" '
         f'font-size="14" font-weight="bold">{TITLE.get(opt, opt)}, {TITLE.get(prec, prec)}</text>',
         f'<rect x="{ox + LEFT}" y="{oy + TOP}" width="{pw}" height="{ph}" fill="none" '
         f'stroke="black"/>']
    tick = x0
    while tick <= x1:
        e.append(f'<line x1="{px(tick):.1f}" y1="{py(0):.1f}" x2="{px(tick):.1f}" '
                 f'y2="{py(0) + 4:.1f}" stroke="black"/>')
        e.append(f'<text x="{px(tick):.1f}" y="{py(0) + 16:.1f}" text-anchor="middle" '
                 f'font-size="11">{tick}</text>')
        tick += 1 if x1 - x0 <= 12 else 2
    y = 0.0
    while y <= top + 1e-9:
        e.append(f'<line x1="{ox + LEFT - 4}" y1="{py(y):.1f}" x2="{ox + LEFT + pw}" '
                 f'y2="{py(y):.1f}" stroke="#dddddd"/>')
        e.append(f'<text x="{ox + LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end" '
                 f'font-size="11">{fmt(y)}</text>')
        y += step
    e.append(f'<line x1="{ox + LEFT}" y1="{py(1):.1f}" x2="{ox + LEFT + pw}" y2="{py(1):.1f}" '
             f'stroke="black" stroke-dasharray="4 3"/>')
    e.append(f'<text x="{ox + LEFT + pw / 2:.1f}" y="{oy + H - 8}" text-anchor="middle" '
             f'font-size="12">log2 N (elements)</text>')
    e.append(f'<text transform="translate({ox + 16},{oy + TOP + ph / 2:.1f}) rotate(-90)" '
             f'text-anchor="middle" font-size="12">speedup over PyTorch</text>')
    for s in SERIES:
        pts = sorted(data[s].items())
        if not pts:
            continue
        c = COLORS[s]
        dash = ' stroke-dasharray="6 3"' if s == "UB" else ""
        e.append(f'<g class="series" data-series="{s}" stroke="{c}" fill="{c}">')
        e.append('<polyline fill="none" stroke-width="2"' + dash + ' points="' +
                 " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in pts) + '"/>')
        for x, v in pts:
            e.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" data-x="{x:g}" '
                     f'data-y="{v:.6g}"><title>{s}, 2^{x:g}: {v:.3f}x</title></circle>')
        e.append("</g>")
    e.append("</g>")
    return e


def legend(y):
    e = ['<g class="legend">']
    x = LEFT
    for s in SERIES:
        dash = ' stroke-dasharray="6 3"' if s == "UB" else ""
        e.append(f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{COLORS[s]}" '
                 f'stroke-width="2"{dash}/>')
        label = "UB (NCCL AllReduce alone)" if s == "UB" else s
        e.append(f'<text x="{x + 30}" y="{y + 4}" font-size="12">{label}</text>')
        x += 60 + 8 * len(label)
    e.append("</g>")
    return e


def svg(panels):
    keys = [k for k in PANELS if k in panels] + sorted(k for k in panels if k not in PANELS)
    cols = min(len(keys), 2)
    nrows = (len(keys) + cols - 1) // cols
    width, height = cols * W, nrows * H + 30
    e = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
         f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, (opt, prec) in enumerate(keys):
        e += panel_svg(opt, prec, panels[(opt, prec)], (i % cols) * W, (i // cols) * H)
    e += legend(nrows * H + 14)
    e.append("</svg>")
    return "\n".join(e) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("-o", "--output", default="fig6.svg")
    a = ap.parse_args()
    rows = [r for path in a.csv for r in rows_of(path)]
    panels = speedups(rows)
    if not panels:
        sys.exit("plot_fig6.py: no optimizer has both a PyTorch baseline and a schedule "
                 "measured at the same N: nothing to plot")
    with open(a.output, "w") as f:
        f.write(svg(panels))
    print("panel,N,series,speedup")
    for (opt, prec), data in sorted(panels.items()):
        for s in SERIES:
            for x, v in sorted(data[s].items()):
                print(f"{opt}-{prec},2^{x:g},{s},{v:.3f}")


if __name__ == "__main__":
    main()
