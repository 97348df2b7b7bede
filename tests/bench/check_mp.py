"""tests/bench/check_mp.py: bench/mp.sh's steps after the GPUs, on fixtures
(run by tests/run.sh, group bench, where python3 is installed):
bench/mp_rows.awk on coconet tables of a model-parallel layer, of the
pipeline and of the AllReduce alone (times, verdicts, notations without
"(paper: ...)", a FAILED row);
bench/mp_merge.py on those rows and PyTorch's (the ratios to Megatron, the
summary's cells, NA rows, a malformed line and a size without a baseline
refused with status 1); bench/plot_fig10.py where matplotlib is installed
(the SVG parses, one panel per layer and type, failed variants labelled;
no ratio to plot: status 1). Exits 1 on any failure, printing each."""
import csv
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PY = sys.executable

MLP = """cuda: cached /root/.cache/coconet/0123456789abcdef.so
mlp: 4 ranks on NVIDIA H200 (sm_90), NCCL 2.28.3, fused collectives: one kernel over the peers' memory, cuda backend, seed 1
output       type  shape              layout       fnv-1a (cpu)                sum           norm
out          FP16  [8,1024,3072]      Replicated   fad33e10b1c7ca08        -71.395        39.5446
cpu reference 9000.0 ms (every schedule checked against the program's)

schedule                 outputs       max-abs      max-rel    differing/elements   outside      gpu-time
program                  rounding         0.25     3.52e+28    10/100663296          0      1.400 ms  
MM_AR_C                  rounding         0.25     3.52e+28    10/100663296          0      0.800 ms  MM-AR-C
MM_RS_C_AG               bitwise             0            0     0/100663296          0      0.700 ms  MM-RS-C-AG
ol_MM_fuse_RS_C_AG       rounding         0.25     3.52e+28    10/100663296          0      0.500 ms  ol(MM,fuse(RS-C-AG))
MM_fuse_RS_C_AG          WRONG             9.5          1.0    99/100663296         99      0.300 ms  MM-fuse(RS-C-AG)
ol_MM_AR_C               FAILED              0            0     0/0                  0      0.000 ms  ol(MM,AR)-C
gpu-time: median of 20 runs after 3 warm-up runs, the slowest rank's
gpu-checks: guard bytes intact and the repeat run bit for bit the checked run's in 5 of 6 variants, on every rank

roofline                     memory       link        flops       GB/s    TFLOP/s  bound    of-bound
program                     26.2 MB        0 B   13.1 TFLOP     0.2968  0.0001485  memory      0.0 %
exit status 1
"""
PIPE = """transformer: 4 ranks on NVIDIA H200 (sm_90), NCCL 2.28.3, cuda backend, seed 1
cpu reference 800.0 ms (every schedule checked against the program's)

schedule                 outputs       max-abs      max-rel    differing/elements   outside      gpu-time
program                  bitwise             0            0     0/201326592          0      4.000 ms  
paper                    bitwise             0            0     0/201326592          0      1.000 ms  
AR_C_P2P_AG              bitwise             0            0     0/201326592          0      3.000 ms  AR-C-P2P-AG (paper: AR-P2P-C-AG)
RS_C_P2P_AG              bitwise             0            0     0/201326592          0      2.000 ms  RS-C-P2P-AG (paper: RS-P2P-C-AG)
ol_RS_fuse_C_P2P_AG_2    bitwise             0            0     0/201326592          0      1.250 ms  ol(RS,fuse(C-P2P),AG) (paper: ol(RS,fuse(P2P-C),AG))
ol_fuse_RS_AG_fuse_C_P2P bitwise             0            0     0/201326592          0      1.600 ms  ol(fuse(RS-AG),fuse(C-P2P)) (paper: ol(fuse(RS-AG),fuse(P2P-C)))
gpu-time: median of 20 runs after 3 warm-up runs, the slowest rank's
"""
AR = """allreduce: 4 ranks on NVIDIA H200 (sm_90), NCCL 2.28.3, cuda backend, seed 1

schedule                 outputs       max-abs      max-rel    differing/elements   outside      gpu-time
program                  bitwise             0            0     0/100663296          0      0.300 ms  
fused                    bitwise             0            0     0/100663296          0      0.250 ms  
gpu-time: median of 20 runs after 3 warm-up runs, the slowest rank's
"""
MLP_PRE, PIPE_PRE = "mlp|8|1024|3072|12288|4|4", "pipeline|2|2048|12288||4|2"
AR_PRE = "allreduce|8|1024|3072||4|4"
TORCH = """# bench/torch_mp.py rows
mlp|8|1024|3072|12288|4|4|fp16|torch_megatron|1.0000|measured|x @ w; all_reduce; dropout(y + b) + r
mlp|8|1024|3072|12288|4|4|fp16|torch_matmul|0.2000|measured|[8192, 3072] x [3072, 3072]
mlp|8|1024|3072|12288|4|4|fp16|torch_allreduce|0.4000|measured|NCCL all_reduce of [8192, 3072]
mlp|8|1024|3072|12288|4|4|fp16|torch_pointwise|0.2500|measured|dropout(y + b) + r
mlp|8|1024|3072|12288|4|4|fp16|torch_async_tp|NA|NA|unavailable: torch.ops.symm_mem.fused_matmul_reduce_scatter does not exist
mlp|8|1024|3072|12288|4|4|fp16|torch_async_tp_layer|NA|NA|unavailable: torch.ops.symm_mem.fused_matmul_reduce_scatter does not exist
pipeline|2|2048|12288||4|2|fp16|torch_megatron|5.0000|measured|all_reduce in the group; dropout(x + b) + r; send whole
pipeline|2|2048|12288||4|2|fp16|torch_allreduce|2.0000|measured|NCCL all_reduce in groups of 2
pipeline|2|2048|12288||4|2|fp16|torch_pointwise|0.5000|measured|dropout(x + b) + r
pipeline|2|2048|12288||4|2|fp16|torch_send|2.5000|measured|send whole
allreduce|8|1024|3072||4|4|fp16|torch_allreduce|0.4000|measured|NCCL all_reduce of [8192, 3072]
"""

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def run(args, **kw):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, **kw)


def awk_rows(tmp, name, text, pre):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    p = run(["awk", "-v", f"pre={pre}", "-v", "dtype=fp16", "-f", "bench/mp_rows.awk", path])
    check(p.returncode == 0, f"mp_rows.awk on {name}: status {p.returncode}: {p.stderr}")
    return p.stdout.splitlines()


def check_awk(tmp):
    mlp = awk_rows(tmp, "mlp.txt", MLP, MLP_PRE)
    want = [f"{MLP_PRE}|fp16|program|1.400|rounding|program",
            f"{MLP_PRE}|fp16|MM_AR_C|0.800|rounding|MM-AR-C",
            f"{MLP_PRE}|fp16|MM_RS_C_AG|0.700|bitwise|MM-RS-C-AG",
            f"{MLP_PRE}|fp16|ol_MM_fuse_RS_C_AG|0.500|rounding|ol(MM,fuse(RS-C-AG))",
            f"{MLP_PRE}|fp16|MM_fuse_RS_C_AG|0.300|WRONG|MM-fuse(RS-C-AG)",
            f"{MLP_PRE}|fp16|ol_MM_AR_C|0.000|FAILED|ol(MM,AR)-C"]
    check(mlp == want, "mp_rows.awk, mlp table:\n  got  " + "\n       ".join(mlp)
          + "\n  want " + "\n       ".join(want))
    pipe = awk_rows(tmp, "pipe.txt", PIPE, PIPE_PRE)
    check(len(pipe) == 6, f"mp_rows.awk, pipeline table: {len(pipe)} rows, expected 6")
    check(f"{PIPE_PRE}|fp16|ol_RS_fuse_C_P2P_AG_2|1.250|bitwise|ol(RS,fuse(C-P2P),AG)" in pipe,
          "mp_rows.awk: the paper's pipeline schedule without its '(paper: ...)' note:\n  "
          + "\n  ".join(pipe))
    check(f"{PIPE_PRE}|fp16|paper|1.000|bitwise|paper" in pipe, "mp_rows.awk: the file's schedule")
    ar = awk_rows(tmp, "ar.txt", AR, AR_PRE)
    check(ar == [f"{AR_PRE}|fp16|program|0.300|bitwise|program",
                 f"{AR_PRE}|fp16|fused|0.250|bitwise|fused"], f"mp_rows.awk, allreduce: {ar}")
    raw = os.path.join(tmp, "raw-coconet.txt")
    with open(raw, "w") as f:
        f.write("\n".join(mlp + pipe + ar) + "\n")
    return raw


def check_merge(tmp, raw):
    torch_raw = os.path.join(tmp, "raw-torch.txt")
    with open(torch_raw, "w") as f:
        f.write(TORCH)
    # bench/mp.sh's run of ol with 2 chunks (OL_CHUNKS): faster than the
    # unchunked row, so the ol column's
    chunks_raw = os.path.join(tmp, "raw-chunks.txt")
    with open(chunks_raw, "w") as f:
        f.write(f"{MLP_PRE}|fp16|ol_MM_fuse_RS_C_AG/chunks2|0.450|rounding|ol(MM,fuse(RS-C-AG))\n")
    out, summ = os.path.join(tmp, "mp.csv"), os.path.join(tmp, "summary.md")
    p = run([PY, "bench/mp_merge.py", raw, torch_raw, chunks_raw, "-o", out, "--summary", summ])
    check(p.returncode == 0, f"mp_merge.py: status {p.returncode}: {p.stderr}")
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    check(list(rows[0]) == ["layer", "B", "S", "H", "K", "P", "G", "dtype", "variant", "ms",
                            "ratio_to_megatron", "check", "notation"],
          f"mp_merge.py: columns {list(rows[0])}")
    got = {(r["layer"], r["variant"]): r["ratio_to_megatron"] for r in rows}
    for k, v in {("mlp", "MM_AR_C"): "0.8000", ("mlp", "ol_MM_fuse_RS_C_AG"): "0.5000",
                 ("mlp", "torch_megatron"): "1.0000", ("mlp", "torch_async_tp_layer"): "NA",
                 ("mlp", "ol_MM_AR_C"): "NA", ("pipeline", "ol_RS_fuse_C_P2P_AG_2"): "0.2500",
                 ("pipeline", "torch_send"): "0.5000", ("allreduce", "fused"): "0.6250",
                 ("allreduce", "torch_allreduce"): "1.0000"}.items():
        check(got.get(k) == v, f"mp_merge.py: ratio of {k}: {got.get(k)}, expected {v}")
    notes = [r["notation"] for r in rows if r["variant"] == "ol_RS_fuse_C_P2P_AG_2"]
    check(notes == ["ol(RS,fuse(C-P2P),AG)"], f"mp_merge.py: a notation with commas: {notes}")
    text = p.stdout
    check(text == open(summ).read(), "mp_merge.py: --summary differs from what it printed")
    # mlp: best good variant ol_MM_fuse_RS_C_AG with 2 chunks (the WRONG 0.3
    # left out), 2.22x; ol the fastest of its rows, named; ol / max(MM, AR) =
    # 0.45 / 0.4; MM-AR-C 1.25x; failed ones listed
    mlp = [l for l in text.splitlines() if l.startswith("| mlp |")]
    want = ("| mlp | fp16 | 4 | 8 | 12288 | 1.000 | 0.200 | 0.400 | 0.250 | 0.400 | "
            "ol_MM_fuse_RS_C_AG/chunks2 | 0.450 | 2.22x | 0.800 (1.25x) | 0.700 (1.43x) | "
            "0.450 (2.22x) | ol_MM_fuse_RS_C_AG/chunks2 | "
            "1.12 | NA | MM_fuse_RS_C_AG:WRONG ol_MM_AR_C:FAILED |")
    check(mlp == [want], f"mp_merge.py: the mlp line\n  got  {mlp}\n  want {[want]}")
    pipe = [l for l in text.splitlines() if l.startswith("| fp16 | 4 | 2 | 2 |")]
    want = ("| fp16 | 4 | 2 | 2 | 2048 | 12288 | 5.000 | 2.000 | 0.500 | 2.500 | paper | 1.000 | "
            "5.00x | 3.000 (1.67x) | 2.000 (2.50x) | 1.250 (4.00x) | - |")
    check(pipe == [want], f"mp_merge.py: the pipeline line\n  got  {pipe}\n  want {[want]}")
    # N = 8*1024*3072 FP16: 50.3 MB x 2(P-1)/P = 75.5 MB; over 0.4 ms, 0.3, 0.25
    ar = [l for l in text.splitlines() if l.startswith("| fp16 | 4 | 8 | 25165824 |")]
    want = "| fp16 | 4 | 8 | 25165824 | 0.400 | 189 | 0.300 | 252 | 0.250 | 302 | 0.62 | - |"
    check(ar == [want], f"mp_merge.py: the allreduce line\n  got  {ar}\n  want {[want]}")
    check(not any(l.startswith("| allreduce |") for l in text.splitlines()),
          "mp_merge.py: allreduce in the model-parallel table")
    check("NA: unavailable: torch.ops.symm_mem.fused_matmul_reduce_scatter does not exist" in text,
          "mp_merge.py: the reason of the NA rows")
    return out


def check_merge_errors(tmp, raw):
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "w") as f:
        f.write("# a comment\nmlp|8|1024|3072\n")
    p = run([PY, "bench/mp_merge.py", bad, "-o", os.path.join(tmp, "bad.csv")])
    check(p.returncode == 1 and "bad.txt:2: 4 fields, expected 12" in p.stderr,
          f"mp_merge.py on a malformed line: status {p.returncode}, {p.stderr!r}")
    # coconet rows without PyTorch's: no baseline, status 1, each size named
    p = run([PY, "bench/mp_merge.py", raw, "-o", os.path.join(tmp, "alone.csv")])
    check(p.returncode == 1 and "no PyTorch baseline (torch_megatron) for layer=mlp B=8" in p.stderr
          and "no PyTorch baseline (torch_allreduce) for layer=allreduce B=8" in p.stderr
          and "layer=pipeline B=2" in p.stderr and "no row has a ratio" in p.stderr,
          f"mp_merge.py without a baseline: status {p.returncode}, {p.stderr!r}")


def check_plot(tmp, csv_path):
    if run([PY, "-c", "import matplotlib"]).returncode != 0:
        print("check_mp.py: plot_fig10.py not checked: no matplotlib for " + PY)
        return
    svg = os.path.join(tmp, "fig10.svg")
    p = run([PY, "bench/plot_fig10.py", csv_path, "-o", svg])
    check(p.returncode == 0, f"plot_fig10.py: status {p.returncode}: {p.stderr}")
    if p.returncode:
        return
    check("mlp fp16: 8 variants at B = 8" in p.stdout and "pipeline fp16: 7 variants at B = 2"
          in p.stdout and "allreduce fp16: 3 variants at B = 8" in p.stdout,
          f"plot_fig10.py's panels: {p.stdout!r}")
    try:
        root = ET.parse(svg).getroot()
    except ET.ParseError as e:
        check(False, f"plot_fig10.py: the SVG does not parse: {e}")
        return
    texts = " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for want in ("mlp, fp16", "pipeline, fp16", "MM_fuse_RS_C_AG  MM-fuse(RS-C-AG)  [WRONG]",
                 "ol_MM_AR_C  ol(MM,AR)-C  [FAILED]", "torch_megatron", "B = 8",
                 "max(MatMul, AllReduce) / Megatron, B = 8", "AllReduce / Megatron, B = 2",
                 "allreduce, fp16", "time / NCCL all_reduce (PyTorch) (lower is faster)"):
        check(want in texts, f"plot_fig10.py: no text '{want}' in the SVG")
    check("torch_matmul" not in texts, "plot_fig10.py: a part (torch_matmul) drawn as a variant")
    empty = os.path.join(tmp, "empty.csv")
    with open(empty, "w") as f:
        f.write("layer,B,S,H,K,P,G,dtype,variant,ms,ratio_to_megatron,check,notation\n"
                "mlp,8,1024,3072,12288,4,4,fp16,MM_AR_C,0.8,NA,rounding,MM-AR-C\n")
    p = run([PY, "bench/plot_fig10.py", empty, "-o", os.path.join(tmp, "empty.svg")])
    check(p.returncode == 1 and "no row with a ratio" in p.stderr,
          f"plot_fig10.py with nothing to plot: status {p.returncode}, {p.stderr!r}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        raw = check_awk(tmp)
        csv_path = check_merge(tmp, raw)
        check_merge_errors(tmp, raw)
        check_plot(tmp, csv_path)
    if failures:
        print(f"check_mp.py: {len(failures)} failed")
        return 1
    print("check_mp.py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
