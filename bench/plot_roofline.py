"""bench/plot_roofline.py: how close each program gets to the machine's limit,
from the reports of bench/one_gpu.sh (its coconet.log: "== WHAT: command"
before each `coconet run` report, whose roofline table gives each variant's
share of its bound, `of-bound`). One bar per program and size (WHAT) for the
unscheduled program and one for its best variant, as a fraction of the bound
(the measured device copy for memory-bound programs, the FP16 GEMM for the
model-parallel layers); a line at 85 %.

    python3 bench/plot_roofline.py coconet.log [more.log ...] -o roofline.svg

Prints CSV rows `what,variant,bound,of_bound_percent` (the program's and the
best variant's of each WHAT) and writes the plot as SVG, drawn here (no
plotting library needed)."""
import argparse
import re
import sys

ROW = re.compile(r"^(\S+)\s+.*\s(memory|link|gemm)\s+([0-9.]+) %$")


def parse(paths):
    """{what: [(variant, bound, percent), ...]} in the order the logs give
    (the last report of each WHAT)."""
    runs, what, in_table = {}, None, False
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("== "):
                    what = line[3:].split(":", 1)[0]
                    runs[what] = []  # a later log's run of the same WHAT replaces it
                    in_table = False
                elif line.startswith("roofline ") and "of-bound" in line:
                    in_table = True
                elif in_table:
                    m = ROW.match(line.strip())
                    if not m:
                        in_table = False
                    elif what is not None:
                        runs[what].append((m.group(1), m.group(2), float(m.group(3))))
    return {w: rows for w, rows in runs.items() if rows}


def pick(rows):
    """The program's row and the best variant's (the highest share)."""
    program = next((r for r in rows if r[0] == "program"), None)
    best = max(rows, key=lambda r: r[2])
    return program, best


def svg(bars, out):
    """bars: [(label, program %, best %, best's name)]: horizontal bars."""
    left, width, row, top = 230, 420, 34, 40
    height = top + row * len(bars) + 60
    scale = width / 100.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 170}" '
             f'height="{height}" font-family="sans-serif" font-size="12">',
             f'<text x="{left}" y="20" font-size="14">share of the bound (measured limits), '
             'one GPU</text>']
    for i, (label, prog, best, name) in enumerate(bars):
        y = top + i * row
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end">{label}</text>')
        if prog is not None:
            parts.append(f'<rect x="{left}" y="{y + 2}" width="{prog * scale:.1f}" height="11" '
                         'fill="#bbbbbb"/>')
        parts.append(f'<rect x="{left}" y="{y + 14}" width="{best * scale:.1f}" height="11" '
                     'fill="#3366aa"/>')
        parts.append(f'<text x="{left + best * scale + 4:.1f}" y="{y + 24}">{best:.1f} % '
                     f'({name})</text>')
    x85 = left + 85 * scale
    y_end = top + row * len(bars)
    parts.append(f'<line x1="{x85:.1f}" y1="{top - 4}" x2="{x85:.1f}" y2="{y_end}" '
                 'stroke="#cc3333" stroke-dasharray="4,3"/>')
    parts.append(f'<text x="{x85:.1f}" y="{y_end + 14}" text-anchor="middle" fill="#cc3333">'
                 '85 %</text>')
    for pct in (0, 50, 100):
        parts.append(f'<text x="{left + pct * scale:.1f}" y="{y_end + 30}" '
                     f'text-anchor="middle">{pct} %</text>')
    parts.append(f'<text x="{left}" y="{y_end + 48}" fill="#777777">grey: the program; blue: '
                 'its best variant</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("-o", "--out", default="roofline.svg")
    a = ap.parse_args()
    runs = parse(a.logs)
    if not runs:
        sys.exit("plot_roofline.py: no roofline table in " + ", ".join(a.logs))
    bars = []
    print("what,variant,bound,of_bound_percent")
    for what, rows in runs.items():
        program, best = pick(rows)
        for r in ([program] if program and program is not best else []) + [best]:
            print(f"{what},{r[0]},{r[1]},{r[2]:.1f}")
        bars.append((what, program[2] if program else None, best[2], best[0]))
    svg(bars, a.out)


if __name__ == "__main__":
    main()
