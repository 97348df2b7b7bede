"""bench/torch_one_gpu.py: what a PyTorch user gets on one GPU for the
computations of coconet's one-GPU benchmark (bench/one_gpu.sh), timed as
coconet times (CUDA events, 3 warm-up runs, the median of ITERS runs):

  copy         p.copy_(g), FP32: the device's copy bandwidth (2 x 4 N bytes)
  adam         torch._fused_adam_ on FP32 p, g, m, v (28 bytes an element)
  adam_mixed   the same after g.float() of FP16 gradients
  sgd          torch._fused_sgd_ with momentum, FP32 (20 bytes an element)
  sgd_mixed    the same after g.float() of FP16 gradients
  lamb         examples/lamb.coco's formula with torch._foreach_* ops, FP32
  lamb_mixed   the same after g.float() of FP16 gradients
  mm           torch.matmul FP16 [B*S, K] x [K, H] (cuBLAS)
  pointwise    dropout(y + b, 0.1) + r, FP16 [B*S, H]
  layer        mm then pointwise: the Megatron-style model-parallel layer at P = 1
  mm_shape     torch.matmul FP16 [M, K] x [K, N] at each --mm shape (bench/matmul.sh);
               a shape nt:MxKxN multiplies by the transpose of a [N, K] tensor,
               tn:MxKxN multiplies the transpose of a [K, M] tensor (both
               views, read in place by cuBLAS)

    python3 bench/torch_one_gpu.py --pow 24 28 --b 8 16 [--iters 20]
    python3 bench/torch_one_gpu.py --pow --b --mm 8192x768x3072 [--iters 50]

Prints CSV: torch,<what>,<size>,<ms>,<GB/s or TFLOP/s>,<unit>."""
import argparse
import statistics

import torch

BETA1, BETA2, LR, EPS = 0.9, 0.999, 1e-3, 1e-8
S, H = 1024, 3072


def timed(fn, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(3 + iters):
        torch.cuda.synchronize()
        # as coconet's runs (rt/run.c): the start event follows a short wait
        # on the GPU, so that fn's first launch is queued before it starts
        torch.cuda._sleep(20000)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def row(what, size, ms, amount, unit):
    print(f"torch,{what},{size},{ms:.4f},{amount / ms / 1e6:.1f},{unit}", flush=True)


def optimizers(n, iters):
    f32 = dict(device="cuda", dtype=torch.float32)
    p, g, m, v = (torch.randn(n, **f32) for _ in range(4))
    v.abs_()
    step = torch.tensor([1.0], **f32)
    row("copy", n, timed(lambda: p.copy_(g), iters), 8 * n, "GB/s")

    def adam(grad):
        torch._fused_adam_([p], [grad], [m], [v], [], [step], lr=LR, beta1=BETA1, beta2=BETA2,
                           weight_decay=0.0, eps=EPS, amsgrad=False, maximize=False)
    row("adam", n, timed(lambda: adam(g), iters), 28 * n, "GB/s")
    g16 = g.half()
    row("adam_mixed", n, timed(lambda: adam(g16.float()), iters), 26 * n, "GB/s")
    def sgd(grad, first=False):
        torch._fused_sgd_([p], [grad], [m], weight_decay=0.0, momentum=0.9, lr=LR,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=first)
    sgd(g, True)
    row("sgd", n, timed(lambda: sgd(g), iters), 20 * n, "GB/s")
    row("sgd_mixed", n, timed(lambda: sgd(g16.float()), iters), 18 * n, "GB/s")

    def lamb(g=g):
        torch._foreach_mul_([m], BETA1)
        torch._foreach_add_([m], [g], alpha=1 - BETA1)
        torch._foreach_mul_([v], BETA2)
        torch._foreach_addcmul_([v], [g], [g], value=1 - BETA2)
        u = torch._foreach_div(torch._foreach_sqrt(torch._foreach_div([v], 1 - BETA2)), 1.0)
        torch._foreach_add_(u, 1e-6)
        u = torch._foreach_div(torch._foreach_div([m], 1 - BETA1), u)
        torch._foreach_add_(u, [p], alpha=0.01)
        pn, un = torch._foreach_norm([p])[0], torch._foreach_norm(u)[0]
        ratio = torch.where((pn > 0) & (un > 0), pn / un, torch.ones_like(pn))
        torch._foreach_mul_(u, [ratio])
        torch._foreach_add_([p], u, alpha=-LR)
    row("lamb", n, timed(lamb, iters), 28 * n, "GB/s")
    row("lamb_mixed", n, timed(lambda: lamb(g16.float()), iters), 26 * n, "GB/s")
    del p, g, m, v, g16
    torch.cuda.empty_cache()


def layer(b, k, iters):
    f16 = dict(device="cuda", dtype=torch.float16)
    x, w = torch.randn(b * S, k, **f16), torch.randn(k, H, **f16) / k ** 0.5
    bias, r = torch.randn(H, **f16), torch.randn(b * S, H, **f16)
    y = x @ w
    flops = 2.0 * b * S * k * H
    size = f"B={b} K={k}"
    row("mm", size, timed(lambda: torch.matmul(x, w, out=y), iters), flops / 1e3, "TFLOP/s")
    drop = torch.nn.functional.dropout
    row("pointwise", size, timed(lambda: drop(y + bias, 0.1) + r, iters), 6 * b * S * H,
        "GB/s")
    row("layer", size, timed(lambda: drop(x @ w + bias, 0.1) + r, iters), flops / 1e3,
        "TFLOP/s")


def mm_shape(shape, iters):
    form, _, dims = shape.rpartition(":")
    m, k, n = (int(d) for d in dims.split("x"))
    f16 = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(k, m, **f16).t() if form == "tn" else torch.randn(m, k, **f16)
    w = torch.randn(n, k, **f16).t() if form == "nt" else torch.randn(k, n, **f16)
    w /= k ** 0.5
    y = x @ w
    row("mm_shape", shape, timed(lambda: torch.matmul(x, w, out=y), iters), 2.0 * m * k * n / 1e3,
        "TFLOP/s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--pow", type=int, nargs="*", default=[24, 28])
    ap.add_argument("--b", type=int, nargs="*", default=[8, 16])
    ap.add_argument("--mm", nargs="*", default=[], help="MxKxN shapes for mm_shape rows")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for p in a.pow:
        optimizers(1 << p, a.iters)
    for b in a.b:
        for k in (H, 4 * H):
            layer(b, k, a.iters)
    for shape in a.mm:
        mm_shape(shape, a.iters)
