"""tests/bench/check_plot.py: bench/plot_fig6.py on a small synthetic CSV (run
by tests/run.sh where python3 is installed). The SVG must parse as XML and
hold one panel per optimizer x precision with a baseline, each with the
series AR-Opt, RS-Opt-AG, fuse(RS-Opt-AG) and UB at the expected points and
speedups: the fastest good variant of each series, WRONG/GUARD rows left
out, UB over PyTorch's all_reduce (or coconet's AllReduce program). Also the
older CSV forms, and a CSV with nothing to plot. Exits 1 on any failure."""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
CSV = """tool,program,optimizer,precision,N,variant,schedule,result,ms
coconet,allreduce_fused16,allreduce,fp16,1024,program,program,bitwise,0.5
coconet,adam_fp32,adam,fp32,1024,program,program,bitwise,3.0
coconet,adam_fp32,adam,fp32,1024,AR_Opt,AR-Opt,rounding,2.0
coconet,adam_fp32,adam,fp32,1024,RS_Opt_AG,RS-Opt-AG,bitwise,1.6
coconet,adam_fp32,adam,fp32,1024,RS_Opt_AG_2,RS-Opt-AG,bitwise,0.8
coconet,adam_fp32,adam,fp32,1024,fuse_RS_Opt_AG_4,fuse(RS-Opt-AG),WRONG,0.1
coconet,adam_fp32,adam,fp32,1024,fuse_RS_Opt_AG,fuse(RS-Opt-AG),bitwise,0.5
coconet,adam_fp32,adam,fp32,1024,ol_RS_AG_Opt,"ol(RS,AG)-Opt",bitwise,0.01
coconet,adam_fp32,adam,fp32,1048576,AR_Opt,AR-Opt,bitwise,4.0
coconet,adam_fp32,adam,fp32,1048576,fuse_RS_Opt_AG_4,fuse(RS-Opt-AG),GUARD,0.2
coconet,adam_fp32,adam,fp32,1048576,paper,paper,bitwise,2.5
coconet,lamb,lamb,mixed,1024,fuse_RS_Opt_AG_3,fuse(RS-Opt-AG),bitwise,0.25
coconet,lamb,lamb,mixed,2048,AR_Opt,AR-Opt,bitwise,1.0
coconet,lamb_fp32,lamb,fp32,1024,AR_Opt,AR-Opt,bitwise,1.0
coconet,lamb_fp32,lamb,fp32,4096,-,-,skipped,
torch,torch_adam,adam,fp32,1024,allreduce,AllReduce,measured,0.4
torch,torch_adam,adam,fp32,1024,allreduce+fused_adam,baseline,measured,1.0
torch,torch_adam,adam,fp32,1048576,allreduce,AllReduce,measured,4.0
torch,torch_adam,adam,fp32,1048576,allreduce+fused_adam,baseline,measured,5.0
torch,torch_lamb,lamb,mixed,1024,allreduce+foreach_lamb,baseline,measured,1.5
"""
# adam-fp32 at 2^10: AR 1/2, RS best 1/0.8, fuse 1/0.5 (the WRONG 0.1 left
# out), UB 1/0.4; at 2^20: AR 5/4, fuse 5/2.5 (paper; GUARD left out), UB
# 5/4. lamb-mixed at 2^10: fuse 1.5/0.25, UB over coconet's FP16 AllReduce
# 1.5/0.5; no baseline at 2^11, none for lamb-fp32: no panel.
WANT = {
    "adam-fp32": {"AR-Opt": {10: 0.5, 20: 1.25}, "RS-Opt-AG": {10: 1.25},
                  "fuse(RS-Opt-AG)": {10: 2.0, 20: 2.0}, "UB": {10: 2.5, 20: 1.25}},
    "lamb-mixed": {"fuse(RS-Opt-AG)": {10: 6.0}, "UB": {10: 3.0}},
}
OLD = """tool,program,N,variant,result,ms
coconet,adam,1024,AR_Opt,bitwise,0.5
coconet,adam,1024,fuse_RS_Opt_AG_4,bitwise,0.25
"""
OLD_TORCH = "torch,mixed,1024,0.5,1.0\n"

fails = 0


def check(ok, what):
    global fails
    if not ok:
        fails += 1
        print(f"FAIL: {what}")


def plot(tmp, *csvs):
    paths = []
    for i, text in enumerate(csvs):
        paths.append(os.path.join(tmp, f"in{i}.csv"))
        with open(paths[-1], "w") as f:
            f.write(text)
    svg = os.path.join(tmp, "fig.svg")
    if os.path.exists(svg):
        os.remove(svg)
    r = subprocess.run([sys.executable, "bench/plot_fig6.py", *paths, "-o", svg],
                       capture_output=True, text=True)
    return r, svg


def panels(svg):
    """{panel: {series: {x: y}}} read back from the SVG's data attributes."""
    got = {}
    for g in ET.parse(svg).getroot().iter(NS + "g"):
        if g.get("class") != "panel":
            continue
        p = got.setdefault(g.get("id")[len("panel-"):], {})
        for s in g.iter(NS + "g"):
            if s.get("class") == "series":
                pts = {float(c.get("data-x")): float(c.get("data-y")) for c in s.iter(NS + "circle")}
                poly = s.find(NS + "polyline")
                check(poly is not None and len(poly.get("points").split()) == len(pts),
                      f"{p} {s.get('data-series')}: a polyline through every point")
                p[s.get("data-series")] = pts
    return got


def same(got, want):
    if set(got) != set(want):
        return False
    for s in want:
        if set(got[s]) != set(want[s]) or any(abs(got[s][x] - want[s][x]) > 1e-6 for x in want[s]):
            return False
    return True


with tempfile.TemporaryDirectory() as tmp:
    r, svg = plot(tmp, CSV)
    check(r.returncode == 0, f"the plot is made (stderr: {r.stderr.strip()})")
    if r.returncode == 0:
        got = panels(svg)
        check(set(got) == set(WANT), f"panels {sorted(got)}, expected {sorted(WANT)}")
        for name, want in WANT.items():
            check(same(got.get(name, {}), want), f"{name}: {got.get(name)} != {want}")
        check("adam-fp32,2^10,fuse(RS-Opt-AG),2.000" in r.stdout, "the speedups are printed")
        text = open(svg).read()
        check(text.count("UB (NCCL AllReduce alone)") == 1, "one legend")
    r, svg = plot(tmp, OLD, OLD_TORCH)
    check(r.returncode == 0, f"the older CSV forms are read (stderr: {r.stderr.strip()})")
    if r.returncode == 0:
        check(same(panels(svg).get("adam-mixed", {}),
                   {"AR-Opt": {10: 2.0}, "fuse(RS-Opt-AG)": {10: 4.0}, "UB": {10: 2.0}}),
              "older forms: adam mixed from coconet's 'adam' and torch's bare line")
    r, svg = plot(tmp, "tool,program,optimizer,precision,N,variant,schedule,result,ms\n"
                       "coconet,adam,adam,mixed,1024,AR_Opt,AR-Opt,bitwise,1.0\n")
    check(r.returncode == 1 and "nothing to plot" in r.stderr and not os.path.exists(svg),
          "no baseline: a clear error, no SVG")
    r, svg = plot(tmp, "tool,program,N\ncoconet,adam\n")
    check(r.returncode == 1 and "no known format" in r.stderr, "a malformed row is refused")
print(f"plot_fig6: {'failed' if fails else 'passed'}")
sys.exit(1 if fails else 0)
