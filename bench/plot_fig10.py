"""bench/plot_fig10.py: a plot like the paper's Figure 10 from bench/mp.sh's
CSV (OUT/mp.csv, written by bench/mp_merge.py): a row of panels per layer, a
column per element type; in each panel, one bar per variant and size, the variant's time
over the Megatron-style PyTorch baseline's at that size (1.0: as fast;
lower is faster; the layer allreduce: over NCCL's all_reduce alone).
Variants: every coconet schedule whose check passed, torch_megatron and
torch_async_tp_layer (allreduce: torch_allreduce); a dotted line per size marks
max(MatMul alone, AllReduce alone) over Megatron (the model-parallel
layers), or the AllReduce over Megatron (the pipeline). Rows whose check
failed are labelled with it and have no bar. Needs matplotlib.

    python3 bench/plot_fig10.py OUT/mp.csv -o OUT/fig10.svg

Exit status 1 (with the reason) when matplotlib is missing or no row has a
ratio to plot."""
import argparse
import csv
import sys

GOOD = ("bitwise", "rounding", "unchecked", "measured")
TORCH_BARS = ("torch_megatron", "torch_async_tp_layer")
# the layer whose baseline is NCCL's AllReduce alone (bench/mp_merge.py)
ALLREDUCE = "allreduce"
LAYER_ORDER = ("self_attention", "mlp", "pipeline", "pipeline_linear", ALLREDUCE)
# the schedules the paper's Figure 10 and section 6.3 compare (bold labels)
NAMED = ("MM-AR-C", "MM-RS-C-AG", "ol(MM,fuse(RS-C-AG))", "AR-C-P2P-AG", "RS-C-P2P-AG",
         "ol(RS,fuse(C-P2P),AG)")


def ratio(row):
    try:
        v = float(row["ratio_to_megatron"])
    except (KeyError, ValueError):
        return None
    return v if v > 0 else None


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"layer", "B", "dtype", "variant", "ms", "ratio_to_megatron", "check", "notation"}
    if rows and not need <= set(rows[0]):
        raise ValueError(f"{path}: columns {sorted(need - set(rows[0]))} missing")
    return rows


def label(row):
    v, n = row["variant"], row.get("notation", "")
    if v.startswith("torch_") or not n or n == v:
        return v
    return f"{v}  {n}"


def panels(rows):
    """{(layer, dtype): {"sizes": [B...], "bars": {label: {B: ratio}},
    "bound": {B: ratio}, "bad": {label: check}}} in a stable order."""
    out = {}
    for r in rows:
        torch_bars = ("torch_allreduce",) if r["layer"] == ALLREDUCE else TORCH_BARS
        plotted = r["variant"] in torch_bars or not r["variant"].startswith("torch_")
        p = out.setdefault((r["layer"], r["dtype"]), {"sizes": [], "bars": {}, "bound": {},
                                                       "bad": {}, "parts": {}})
        b = int(r["B"])
        if b not in p["sizes"]:
            p["sizes"].append(b)
        if r["variant"] in ("torch_matmul", "torch_allreduce") and r["layer"] != ALLREDUCE:
            p["parts"].setdefault(b, {})[r["variant"]] = ratio(r)
        if not plotted:
            continue
        if r["check"] not in GOOD:
            p["bad"][label(r)] = r["check"]
            p["bars"].setdefault(label(r), {})
        elif ratio(r) is not None:
            p["bars"].setdefault(label(r), {})[b] = ratio(r)
    for (layer, _), p in out.items():
        for b, parts in p["parts"].items():
            got = [v for k, v in parts.items() if v is not None and
                   (layer != "pipeline" or k == "torch_allreduce")]
            if got:
                p["bound"][b] = max(got)
        p["sizes"].sort()
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))  # as the run went: fp16 first
    order = sorted(out, key=lambda k: (LAYER_ORDER.index(k[0]) if k[0] in LAYER_ORDER else 9,
                                       k[0], dtypes.index(k[1])))
    return {k: out[k] for k in order if any(out[k]["bars"].values())}


def ordered(p):
    """The panel's bar labels: PyTorch's first (Megatron on top), then
    coconet's in the order of the run."""
    torch_first = [t for t in TORCH_BARS + ("torch_allreduce",) if t in p["bars"]]
    return torch_first + [n for n in p["bars"] if n not in torch_first]


def draw(ax, layer, dtype, p, colours):
    names = ordered(p)
    k = len(p["sizes"])
    width = 0.8 / k
    for j, b in enumerate(p["sizes"]):
        ys = [i + (j - (k - 1) / 2) * width for i in range(len(names))]
        xs = [p["bars"][nm].get(b, 0.0) for nm in names]
        c = colours[j % len(colours)]
        ax.barh(ys, xs, height=width, color=c, label=f"B = {b}")
        if b in p["bound"]:
            what = "AllReduce" if layer == "pipeline" else "max(MatMul, AllReduce)"
            ax.axvline(p["bound"][b], color=c, linestyle=":", label=f"{what} / Megatron, B = {b}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([f"{nm}  [{p['bad'][nm]}]" if nm in p["bad"] else nm for nm in names],
                       fontsize=7)
    for tick, nm in zip(ax.get_yticklabels(), names):
        if any(nm.endswith("  " + n) for n in NAMED):
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    base = "NCCL all_reduce (PyTorch)" if layer == ALLREDUCE else "Megatron-style PyTorch"
    ax.set_xlabel(f"time / {base} (lower is faster)")
    ax.set_title(f"{layer}, {dtype}")
    ax.legend(fontsize=7, loc="lower right")


def plot(data, path):
    """One row of panels per layer, one column per element type."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.fonttype"] = "none"  # text as text: searchable, smaller

    layers = list(dict.fromkeys(layer for layer, _ in data))
    dtypes = list(dict.fromkeys(dtype for _, dtype in data))
    heights = [max(0.28 * len(p["bars"]) * len(p["sizes"]) + 1.2
                   for (layer, _), p in data.items() if layer == row) for row in layers]
    fig, axes = plt.subplots(len(layers), len(dtypes), figsize=(9 * len(dtypes), sum(heights)),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, layer in enumerate(layers):
        for j, dtype in enumerate(dtypes):
            if (layer, dtype) in data:
                draw(axes[i, j], layer, dtype, data[(layer, dtype)], colours)
            else:
                axes[i, j].set_axis_off()
    fig.tight_layout()
    fig.savefig(path, format="svg")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="bench/mp.sh's mp.csv")
    ap.add_argument("-o", "--out", required=True, help="the SVG to write")
    a = ap.parse_args()
    try:
        import matplotlib  # noqa: F401  (checked before any work)
    except ImportError:
        print("plot_fig10.py: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 1
    try:
        data = panels(read(a.csv))
    except (OSError, ValueError) as e:
        print(f"plot_fig10.py: {e}", file=sys.stderr)
        return 1
    if not data:
        print(f"plot_fig10.py: {a.csv}: no row with a ratio to a Megatron-style time",
              file=sys.stderr)
        return 1
    plot(data, a.out)
    for (layer, dtype), p in data.items():
        print(f"plot_fig10.py: {layer} {dtype}: {len(p['bars'])} variants at B = "
              + ", ".join(map(str, p["sizes"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
