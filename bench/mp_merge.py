"""bench/mp_merge.py: bench/mp.sh's raw rows (coconet's variants, parsed
from its tables, and bench/torch_mp.py's baselines) into one CSV with each
time's ratio to the Megatron-style baseline of its size, and the summary
tables (markdown) of the model-parallel layers, of the pipeline and of the
AllReduce alone.

    python3 bench/mp_merge.py OUT/raw-*.txt -o OUT/mp.csv [--summary OUT/summary.md]

Raw rows, one a line, '|'-separated (blank lines and lines starting with #
are skipped):
    layer|B|S|H|K|P|G|dtype|variant|ms|check|notation
check: bitwise, rounding, unchecked, WRONG, FAILED, ... (coconet), measured
(torch), NA (not measured: ms NA, the reason in notation).

CSV columns: layer,B,S,H,K,P,G,dtype,variant,ms,ratio_to_megatron,check,notation
where ratio_to_megatron = ms / (torch_megatron's ms of the same layer, sizes,
P, G and dtype; for the layer allreduce, torch_allreduce's); lower is faster.

Exit status 1 when a line is malformed, when a size with coconet rows has no
Megatron-style time, or when no row has a ratio: every such case is named."""
import argparse
import csv
import sys

FIELDS = ["layer", "B", "S", "H", "K", "P", "G", "dtype", "variant", "ms", "check", "notation"]
COLUMNS = FIELDS[:10] + ["ratio_to_megatron"] + FIELDS[10:]
SIZE = ("layer", "B", "S", "H", "K", "P", "G", "dtype")
GOOD = ("bitwise", "rounding", "unchecked", "measured")
MEGATRON = "torch_megatron"
# the baseline of a layer that is not Megatron's: the AllReduce alone
BASELINE = {"allreduce": "torch_allreduce"}
# the schedules the summary names, by the paper's notation
MP_NAMED = ["MM-AR-C", "MM-RS-C-AG", "ol(MM,fuse(RS-C-AG))"]
PIPE_NAMED = ["AR-C-P2P-AG", "RS-C-P2P-AG", "ol(RS,fuse(C-P2P),AG)"]


class BadInput(Exception):
    pass


def number(text):
    """A time in ms, or None (NA, empty, not a positive number)."""
    try:
        v = float(text)
    except ValueError:
        return None
    return v if v > 0 else None


def read_raw(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip() or line.startswith("#"):
                    continue
                parts = line.split("|")
                if len(parts) != len(FIELDS):
                    raise BadInput(f"{path}:{n}: {len(parts)} fields, expected {len(FIELDS)} "
                                   f"({'|'.join(FIELDS)}): {line[:200]}")
                row = dict(zip(FIELDS, (p.strip() for p in parts)))
                if not row["layer"] or not row["variant"] or not row["B"].isdigit():
                    raise BadInput(f"{path}:{n}: no layer, variant or B: {line[:200]}")
                rows.append(row)
    return rows


def baseline(layer):
    """The PyTorch variant a layer's times are divided by."""
    return BASELINE.get(layer, MEGATRON)


def key(row):
    return tuple(row[f] for f in SIZE)


def with_ratios(rows):
    """rows with ratio_to_megatron set; the sizes lacking a baseline."""
    base = {}
    for r in rows:
        ms = number(r["ms"])
        if r["variant"] == baseline(r["layer"]) and ms is not None and r["check"] in GOOD:
            base[key(r)] = ms
    missing = []
    for r in rows:
        ms, b = number(r["ms"]), base.get(key(r))
        r["ratio_to_megatron"] = f"{ms / b:.4f}" if ms is not None and b else "NA"
        if b is None and not r["variant"].startswith("torch_") and key(r) not in missing:
            missing.append(key(r))
    return rows, missing


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: r[c] for c in COLUMNS})


# ---- the summary ----

def fmt(ms):
    return "NA" if ms is None else f"{ms:.3f}"


def speedup(base, ms):
    return "NA" if base is None or ms is None else f"{base / ms:.2f}x"


class Size:
    """The rows of one size: torch's by variant, coconet's good ones."""

    def __init__(self, rows):
        self.torch = {r["variant"]: number(r["ms"]) for r in rows if r["variant"].startswith("torch_")}
        self.coco = [r for r in rows if not r["variant"].startswith("torch_")]
        self.good = [r for r in self.coco if r["check"] in GOOD and number(r["ms"]) is not None]
        self.bad = [r for r in self.coco if r["check"] not in GOOD]
        self.megatron = self.torch.get(MEGATRON)

    def best(self):
        return min(self.good, key=lambda r: number(r["ms"]), default=None)

    def named(self, notation):
        """The fastest good variant written `notation` (the file's own
        schedules and the enumerated ones may repeat a notation)."""
        hits = [r for r in self.good if r["notation"] == notation]
        return min(hits, key=lambda r: number(r["ms"]), default=None)

    def cell(self, notation):
        r = self.named(notation)
        if r is None:
            return "NA"
        ms = number(r["ms"])
        return f"{fmt(ms)} ({speedup(self.megatron, ms)})"


def grouped(rows, layers):
    """{size key: Size} of the layers given, in the order of first sight."""
    out = {}
    for r in rows:
        if r["layer"] in layers:
            out.setdefault(key(r), []).append(r)
    return {k: Size(v) for k, v in out.items()}


def mp_table(rows):
    sizes = grouped(rows, {r["layer"] for r in rows if r["layer"] not in ("pipeline", "allreduce")})
    if not sizes:
        return []
    head = ["layer", "dtype", "P", "B", "K", "Megatron", "MatMul", "AllReduce", "pointwise",
            "max(MM,AR)", "best coconet", "ms", "speedup"] + MP_NAMED + [
            "ol's variant", "ol / max(MM,AR)", "async TP layer", "failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, s in sizes.items():
        layer, b, _, _, kk, p, _, dtype = k
        mm, ar = s.torch.get("torch_matmul"), s.torch.get("torch_allreduce")
        bound = max(mm, ar) if mm is not None and ar is not None else None
        best = s.best()
        ol = s.named("ol(MM,fuse(RS-C-AG))")
        ol_ms = number(ol["ms"]) if ol else None
        cells = [layer, dtype, p, b, kk, fmt(s.megatron), fmt(mm), fmt(ar),
                 fmt(s.torch.get("torch_pointwise")), fmt(bound),
                 best["variant"] if best else "NA", fmt(number(best["ms"])) if best else "NA",
                 speedup(s.megatron, number(best["ms"])) if best else "NA"]
        cells += [s.cell(n) for n in MP_NAMED]
        cells += [ol["variant"] if ol else "NA"]
        cells += ["NA" if bound is None or ol_ms is None else f"{ol_ms / bound:.2f}",
                  fmt(s.torch.get("torch_async_tp_layer")),
                  " ".join(f"{r['variant']}:{r['check']}" for r in s.bad) or "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def pipe_table(rows):
    sizes = grouped(rows, {"pipeline"})
    if not sizes:
        return []
    head = ["dtype", "P", "G", "B", "S", "H", "Megatron", "AllReduce", "pointwise", "send",
            "best coconet", "ms", "speedup"] + PIPE_NAMED + ["failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, s in sizes.items():
        _, b, ss, h, _, p, g, dtype = k
        best = s.best()
        cells = [dtype, p, g, b, ss, h, fmt(s.megatron), fmt(s.torch.get("torch_allreduce")),
                 fmt(s.torch.get("torch_pointwise")), fmt(s.torch.get("torch_send")),
                 best["variant"] if best else "NA", fmt(number(best["ms"])) if best else "NA",
                 speedup(s.megatron, number(best["ms"])) if best else "NA"]
        cells += [s.cell(n) for n in PIPE_NAMED]
        cells.append(" ".join(f"{r['variant']}:{r['check']}" for r in s.bad) or "-")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def bus_gbs(n, p, ms):
    """nccl-tests' all-reduce bus bandwidth: 2 bytes an element (FP16, BF16)
    x 2(P-1)/P over the time."""
    return "NA" if ms is None else f"{2 * n * 2 * (p - 1) / p / (ms * 1e6):.0f}"


def allreduce_table(rows):
    sizes = grouped(rows, {"allreduce"})
    if not sizes:
        return []
    head = ["dtype", "P", "B", "N", "NCCL (PyTorch)", "bus GB/s", "coconet program", "bus GB/s",
            "fused", "bus GB/s", "fused / NCCL", "failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, s in sizes.items():
        _, b, ss, h, _, p, _, dtype = k
        n, p = int(b) * int(ss) * int(h), int(p)
        nccl = s.torch.get("torch_allreduce")
        prog = next((number(r["ms"]) for r in s.good if r["variant"] == "program"), None)
        fused = next((number(r["ms"]) for r in s.good if r["variant"] == "fused"), None)
        cells = [dtype, p, b, n, fmt(nccl), bus_gbs(n, p, nccl), fmt(prog), bus_gbs(n, p, prog),
                 fmt(fused), bus_gbs(n, p, fused),
                 "NA" if nccl is None or fused is None else f"{fused / nccl:.2f}",
                 " ".join(f"{r['variant']}:{r['check']}" for r in s.bad) or "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def summary(rows):
    out = []
    mp = mp_table(rows)
    if mp:
        out += ["Model-parallel layers (ms; speedup = Megatron / ms; goals: "
                "ol(MM,fuse(RS-C-AG)) >= 1.5x and ol / max(MM,AR) <= 1.15, MM-AR-C >= 1.0x; "
                "ol: the fastest of its rows, e.g. its chunk counts, named in ol's variant):", ""]
        out += mp + [""]
    pipe = pipe_table(rows)
    if pipe:
        out += ["Pipeline (ms; speedup = Megatron / ms; goal: ol(RS,fuse(C-P2P),AG) >= 1.8x "
                "with 2 groups):", ""]
        out += pipe + [""]
    ar = allreduce_table(rows)
    if ar:
        out += ["AllReduce alone, N = B*S*H (ms; bus GB/s as nccl-tests counts; goal: the "
                "FusedAllReduce's bus bandwidth at least NCCL's):", ""]
        out += ar + [""]
    na = sorted({r["notation"] for r in rows if r["check"] == "NA"})
    for why in na:
        out.append(f"NA: {why}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", nargs="+", help="raw row files")
    ap.add_argument("-o", "--out", required=True, help="the CSV to write")
    ap.add_argument("--summary", help="also write the summary tables here")
    a = ap.parse_args()
    try:
        rows = read_raw(a.raw)
    except (OSError, BadInput) as e:
        print(f"mp_merge.py: {e}", file=sys.stderr)
        return 1
    rows, missing = with_ratios(rows)
    write_csv(rows, a.out)
    text = "\n".join(summary(rows)) + "\n"
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text)
    print(text, end="")
    status = 0
    for k in missing:
        print(f"mp_merge.py: no PyTorch baseline ({baseline(k[0])}) for "
              + " ".join(f"{n}={v}" for n, v in zip(SIZE, k)), file=sys.stderr)
        status = 1
    if not any(r["ratio_to_megatron"] != "NA" for r in rows):
        print("mp_merge.py: no row has a ratio to a Megatron-style time", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
