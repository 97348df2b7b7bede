"""bench/torch_opt.py: the baseline a PyTorch user has for a data-parallel
optimizer step: torch.distributed.all_reduce of the gradients, then
  adam: torch._fused_adam_ (one multi-tensor kernel);
  lamb: apex's FusedLAMB where apex is installed, else LAMB written with
        torch._foreach_* ops computing examples/lamb.coco's formula:
        m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
        u = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p;
        p = p - lr r u,  r = ||p|| / ||u||, or 1 where either norm is 0
        (norms of the whole tensor; the LAMB paper's trust ratio, apex's).
One process per GPU (NCCL), timed like coconet: CUDA events, 3 warm-up runs,
the median of ITERS runs, slowest rank.

    python3 bench/torch_opt.py --ranks 4 --pow 20 24 28 [--opt adam lamb]
        [--iters 20] [--lamb auto|apex|foreach]
    python3 bench/torch_opt.py --check     # foreach LAMB against the formula

Prints CSV lines in bench/fused.sh's format:
  torch,torch_<opt>,<opt>,<precision>,<N>,<variant>,<schedule>,measured,<ms>
with variant "allreduce" (schedule "AllReduce": the all_reduce alone) and
"allreduce+<step>" (schedule "baseline"), for precision fp32 (FP32 gradients
and state) and mixed (FP16 gradients all-reduced, cast to FP32, FP32
parameters and state)."""
import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BETA1, BETA2, LR = 0.9, 0.999, 1e-3
LAMB_EPS, LAMB_WD = 1e-6, 0.01


def timed(fn, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    line = torch.zeros(1, device="cuda")
    for i in range(3 + iters):
        # lined up on the GPU, as coconet's runs (rt/run.c): the start event
        # follows a one-element all_reduce, fn queued without the host waiting
        torch.cuda.synchronize()
        dist.all_reduce(line)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(stop))
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def foreach_lamb(p, g, m, v, step):
    """One LAMB step of examples/lamb.coco on lists of tensors (in place on
    p, m, v), each tensor's trust ratio from its own norms."""
    torch._foreach_mul_(m, BETA1)
    torch._foreach_add_(m, g, alpha=1 - BETA1)
    torch._foreach_mul_(v, BETA2)
    torch._foreach_addcmul_(v, g, g, value=1 - BETA2)
    denom = torch._foreach_div(v, 1 - BETA2 ** step)
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, LAMB_EPS)
    u = torch._foreach_div(m, 1 - BETA1 ** step)
    torch._foreach_div_(u, denom)
    torch._foreach_add_(u, p, alpha=LAMB_WD)
    torch._foreach_mul_(u, trust_ratios(p, u))
    torch._foreach_add_(p, u, alpha=-LR)


def trust_ratios(p, u):
    """||p|| / ||u|| of each tensor, 1 where either norm is 0 (lamb.coco's
    Ite(r1 > 0, Ite(r2 > 0, r1 / r2, 1.0), 1.0))."""
    ratios = []
    for pn, un in zip(torch._foreach_norm(p), torch._foreach_norm(u)):
        ratios.append(torch.where((pn > 0) & (un > 0), pn / un, torch.ones_like(pn)))
    return ratios


def apex_lamb():
    try:
        from apex.optimizers import FusedLAMB
    except ImportError:
        return None
    return FusedLAMB


def make_step(opt, kind, par, m, v, steps):
    """The optimizer step on the all-reduced gradient, and its name."""
    if opt == "adam":
        def adam(grad):
            torch._fused_adam_([par], [grad], [m], [v], [], [steps], lr=LR, beta1=BETA1,
                               beta2=BETA2, weight_decay=0.0, eps=1e-8, amsgrad=False,
                               maximize=False)
        return adam, "fused_adam"
    if kind == "apex":
        fused = apex_lamb()(
            [par], lr=LR, betas=(BETA1, BETA2), eps=LAMB_EPS, weight_decay=LAMB_WD)

        def apex(grad):
            par.grad = grad
            fused.step()
        return apex, "apex_fused_lamb"

    def lamb(grad):
        foreach_lamb([par], [grad], [m], [v], 1.0)
    return lamb, "foreach_lamb"


def run(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.ranks,
                            device_id=torch.device("cuda", rank))
    for p in args.pow:
        n = 1 << p
        for opt in args.opt:
            for precision in ("fp32", "mixed"):
                gtype = torch.float32 if precision == "fp32" else torch.float16
                g = torch.randn(n, device="cuda", dtype=gtype)
                par = torch.randn(n, device="cuda")
                m = torch.zeros(n, device="cuda")
                v = torch.zeros(n, device="cuda")
                steps = torch.tensor([1.0], device="cuda")
                step, name = make_step(opt, args.lamb, par, m, v, steps)

                def allreduce():
                    dist.all_reduce(g)

                def both():
                    dist.all_reduce(g)
                    step(g if precision == "fp32" else g.float())

                ar = timed(allreduce, args.iters)
                t = timed(both, args.iters)
                if rank == 0:
                    head = f"torch,torch_{opt},{opt},{precision},{n}"
                    print(f"{head},allreduce,AllReduce,measured,{ar:.4f}", flush=True)
                    print(f"{head},allreduce+{name},baseline,measured,{t:.4f}", flush=True)
                del g, par, m, v, step
                torch.cuda.empty_cache()
    dist.destroy_process_group()


def check():
    """foreach_lamb in FP32 against lamb.coco's formula evaluated in FP64;
    exits 1 when a parameter is off by more than a few FP32 roundings."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(1)
    n, step = 100003, 3.0
    g, p, m = (torch.randn(n, generator=gen) for _ in range(3))
    v = torch.rand(n, generator=gen)
    p64, g64, m64, v64 = (x.double() for x in (p, g, m, v))
    m64 = BETA1 * m64 + (1 - BETA1) * g64
    v64 = BETA2 * v64 + (1 - BETA2) * g64 * g64
    u = (m64 / (1 - BETA1 ** step)) / ((v64 / (1 - BETA2 ** step)).sqrt() + LAMB_EPS)
    u = u + LAMB_WD * p64
    pn, un = p64.norm(), u.norm()
    ratio = pn / un if pn > 0 and un > 0 else 1.0
    want = p64 - LR * ratio * u
    pd, gd, md, vd = (x.to(dev) for x in (p, g, m, v))
    foreach_lamb([pd], [gd], [md], [vd], step)
    err = ((pd.double().cpu() - want).abs() / want.abs().clamp_min(1.0)).max().item()
    print(f"foreach_lamb on {dev}: largest difference from the FP64 formula, relative to "
          f"max(|p|, 1): {err:.3g}")
    return 0 if err < 1e-5 else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--pow", type=int, nargs="+", default=[20, 24])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--opt", nargs="+", choices=("adam", "lamb"), default=["adam", "lamb"])
    ap.add_argument("--lamb", choices=("auto", "apex", "foreach"), default="auto")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        sys.exit(check())
    if a.lamb == "auto":
        a.lamb = "apex" if apex_lamb() else "foreach"
    elif a.lamb == "apex" and not apex_lamb():
        sys.exit("bench/torch_opt.py: --lamb apex: apex.optimizers.FusedLAMB is not importable")
    mp.spawn(run, args=(a,), nprocs=a.ranks)
