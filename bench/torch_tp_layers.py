"""bench/torch_tp_layers.py: coconet.torch.tp's layers on one GPU (P = 1,
no communication: the base of the multi-GPU figures) beside the same
computation in torch eager and torch.compile, each forward + backward:

  mlp   ColumnParallelLinear(H, 4H), GELU (tanh), RowParallelLinear(4H, H)
        against nn.Linear, GELU, nn.Linear
  norm  RowParallelLinearNorm(4H, H, LayerNorm, dropout 0) on a residual
        against nn.Linear, + residual, nn.LayerNorm

    python3 bench/torch_tp_layers.py [--tokens 8192] [--width 768] [--iters 20]
        [--profile] [--host-profile] [--jobs 8]

Prints CSV: tp,<case>,<impl>,<T>x<H>,<gpu ms per iteration>,<host ms per
iteration> (host: the Python time to enqueue one iteration, measured with
the GPU kept busy ahead of it, so that a host-bound case shows it). With
--profile, each case's CUDA kernels under torch.profiler follow (coconet);
with --host-profile, its Python functions under cProfile. The layers'
programs are built first, --jobs at a time."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from torch_one_gpu import timed  # noqa: E402  (the same directory)


def host_ms(fn, iters):
    """Python time to enqueue one call of fn, behind a long GPU sleep"""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))  # about a second of GPU time ahead of the host
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e3 / iters


def mlp_cases(T, H, dtype):
    from coconet.torch import tp
    col = tp.ColumnParallelLinear(H, 4 * H, dtype=dtype)
    row = tp.RowParallelLinear(4 * H, H, dtype=dtype)
    ref = torch.nn.Sequential(torch.nn.Linear(H, 4 * H), torch.nn.GELU("tanh"),
                              torch.nn.Linear(4 * H, H)).to("cuda", dtype)
    x = torch.randn(T, H, device="cuda", dtype=dtype, requires_grad=True)
    gy = torch.randn(T, H, device="cuda", dtype=dtype)
    compiled = torch.compile(ref)
    return {"coconet": lambda: row(F.gelu(col(x), approximate="tanh")).backward(gy),
            "torch": lambda: ref(x).backward(gy),
            "torch.compile": lambda: compiled(x).backward(gy)}


def norm_cases(T, H, dtype):
    from coconet.torch import tp
    layer = tp.RowParallelLinearNorm(4 * H, H, norm="layernorm", p_drop=0.0, dtype=dtype)
    lin = torch.nn.Linear(4 * H, H).to("cuda", dtype)
    ln = torch.nn.LayerNorm(H).to("cuda", dtype)
    x = torch.randn(T, 4 * H, device="cuda", dtype=dtype, requires_grad=True)
    r = torch.randn(T, H, device="cuda", dtype=dtype, requires_grad=True)
    gy = torch.randn(T, H, device="cuda", dtype=dtype)

    def coco():
        out, _ = layer(x, r)
        out.backward(gy)

    def ref(x, r):
        return ln(lin(x) + r)
    compiled = torch.compile(ref)
    return {"coconet": coco, "torch": lambda: ref(x, r).backward(gy),
            "torch.compile": lambda: compiled(x, r).backward(gy)}


def prebuild(T, H, dtype, jobs):
    """The layers' programs built into the cache ahead, `jobs` at a time
    (tp.prebuild; a layer would build its programs one by one at its first
    calls)."""
    from coconet.torch import tp
    layers = torch.nn.Sequential(
        tp.ColumnParallelLinear(H, 4 * H, dtype=dtype), tp.RowParallelLinear(4 * H, H, dtype=dtype),
        tp.RowParallelLinearNorm(4 * H, H, norm="layernorm", p_drop=0.0, dtype=dtype))
    tp.prebuild(layers, T, jobs=jobs)


def host_profile(fn, label, iters):
    import cProfile
    import pstats
    fn()
    torch.cuda.synchronize()
    p = cProfile.Profile()
    p.enable()
    for _ in range(iters):
        fn()
    p.disable()
    torch.cuda.synchronize()
    print("# %s: Python functions over %d iterations (cProfile)" % (label, iters))
    pstats.Stats(p).sort_stats("tottime").print_stats(25)


def profile(fn, label):
    from torch.profiler import ProfilerActivity, profile as prof
    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    print("# %s: kernels over 5 iterations" % label)
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--host-profile", action="store_true")
    ap.add_argument("--jobs", type=int, default=8)
    a = ap.parse_args()
    torch.cuda.set_device(0)
    T, H, dtype = a.tokens, a.width, torch.bfloat16
    prebuild(T, H, dtype, a.jobs)
    for case, make in (("mlp", mlp_cases), ("norm", norm_cases)):
        for impl, fn in make(T, H, dtype).items():
            gpu = timed(fn, a.iters)
            print("tp,%s,%s,%dx%d,%.4f,%.4f" % (case, impl, T, H, gpu, host_ms(fn, a.iters)),
                  flush=True)
            if a.profile and impl == "coconet":
                profile(fn, case)
            if a.host_profile and impl == "coconet":
                host_profile(fn, case, a.iters)


if __name__ == "__main__":
    main()
