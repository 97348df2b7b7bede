"""bench/torch_rows.py: PyTorch's side of bench/rows.sh on one GPU, timed as
coconet times (CUDA events, 3 warm-up runs, the median of ITERS runs), each
computation eager and through torch.compile (its first calls compile, then
it is timed the same way):

  copy      p.copy_(g), FP32, 2^28 elements: the device's copy bandwidth
  ln_fwd    layer_norm(dropout(y + b, 0.1) + r) over rows of H, gamma and beta
  ln_bwd    LayerNorm's backward: dx, dgamma, dbeta from dy, x, mean, rstd, gamma
            (eager: aten.native_layer_norm_backward; compiled: the formulas)
  ln_dx     the same, dx alone (compiled formula; eager: native, dx alone asked)
  gelu_fwd  gelu(y + b) (exact, erf) over [T, 4H]
  gelu_bwd  GELU's backward over [T, 4H] (aten.gelu_backward)

    python3 bench/torch_rows.py --sizes 8192x3072 16384x4096 --types FP16 BF16 [--iters 20]

Prints CSV: torch,<what>,<T>x<H>,<type>,<eager|compiled>,<ms>."""
import argparse

import torch
import torch.nn.functional as F

from torch_one_gpu import timed  # timed as coconet times (the same directory)

TYPES = {"FP16": torch.float16, "BF16": torch.bfloat16, "FP32": torch.float32}


def row(what, size, dtype, mode, ms):
    print(f"torch,{what},{size},{dtype},{mode},{ms:.4f}", flush=True)


def both(what, size, dtype, eager, formula, iters):
    """eager timed as it is; formula through torch.compile"""
    row(what, size, dtype, "eager", timed(eager, iters))
    compiled = torch.compile(formula)
    for _ in range(3):
        compiled()
    row(what, size, dtype, "compiled", timed(compiled, iters))


def ln_fwd(t, h, dtype, name, iters):
    kw = dict(device="cuda", dtype=dtype)
    y, r = torch.randn(t, h, **kw), torch.randn(t, h, **kw)
    b, gam, bet = torch.randn(h, **kw), torch.randn(h, **kw), torch.randn(h, **kw)

    def f():
        return F.layer_norm(F.dropout(y + b, 0.1) + r, (h,), gam, bet)
    both("ln_fwd", f"{t}x{h}", name, f, f, iters)


def ln_bwd(t, h, dtype, name, iters):
    kw = dict(device="cuda", dtype=dtype)
    dy, x, gam, bet = (torch.randn(t, h, **kw), torch.randn(t, h, **kw),
                       torch.randn(h, **kw), torch.randn(h, **kw))
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [h], gam, bet, 1e-5)

    def native(mask):
        return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [h], mean, rstd, gam, bet,
                                                                 mask)

    def formula(dx_only):
        def f():
            xh = (x.float() - mean) * rstd
            dxh = dy.float() * gam.float()
            dx = (dxh - dxh.mean(-1, keepdim=True) - xh * (dxh * xh).mean(-1, keepdim=True)) * rstd
            if dx_only:
                return dx.to(dtype)
            return (dx.to(dtype), (dy.float() * xh).sum(0).to(dtype), dy.float().sum(0).to(dtype))
        return f
    both("ln_bwd", f"{t}x{h}", name, native([True, True, True]), formula(False), iters)
    both("ln_dx", f"{t}x{h}", name, native([True, False, False]), formula(True), iters)


def gelu(t, h, dtype, name, iters):
    kw = dict(device="cuda", dtype=dtype)
    y, dz = torch.randn(t, 4 * h, **kw), torch.randn(t, 4 * h, **kw)
    b = torch.randn(4 * h, **kw)

    def fwd():
        return F.gelu(y + b)

    def bwd():
        return torch.ops.aten.gelu_backward(dz, y)
    both("gelu_fwd", f"{t}x{h}", name, fwd, fwd, iters)
    both("gelu_bwd", f"{t}x{h}", name, bwd, bwd, iters)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="*", default=["8192x3072", "16384x4096"])
    ap.add_argument("--types", nargs="*", default=["FP16", "BF16"])
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    n = 1 << 28
    p, g = torch.empty(n, device="cuda"), torch.randn(n, device="cuda")
    row("copy", str(n), "FP32", "eager", timed(lambda: p.copy_(g), a.iters))
    del p, g
    for size in a.sizes:
        t, h = (int(d) for d in size.split("x"))
        for name in a.types:
            for bench in (ln_fwd, ln_bwd, gelu):
                bench(t, h, TYPES[name], name, a.iters)
                torch.cuda.empty_cache()
