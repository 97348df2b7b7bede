"""bench/torch_optim_step.py: the data-parallel optimizer step on a GPT-2
124M model's parameter shapes (the 148 tensors of GPT-2 small, the output
head tied to the token embedding), under torchrun:

  coconet   coconet.torch.optim.AdamW: one fuse(RS-Opt-AG) over the parameters
            and gradients where they lie (scattered tensors in the arena);
  torch     what DDP + torch.optim.AdamW(fused=True) does at a step: the
            all_reduce of the gradients (DDP keeps them in flat buckets: one
            flat buffer here, its best case, and the average taken), then
            AdamW's fused multi-tensor step.

FP32 parameters, gradients and state. coconet's first step is checked
against all_reduce + torch.optim.AdamW (exit status 1 where it differs).
CUDA events around each step, 3 warm-up steps, the median of ITERS steps,
the slowest rank's; the optimizer state each rank holds. A markdown table
to --out (and stdout).

    torchrun --nproc_per_node=P bench/torch_optim_step.py [--iters 20] [--out FILE]
    python3 bench/torch_optim_step.py --build-only --ranks P   (its program, into the cache)"""
import argparse
import os
import statistics
import sys
import time

LR, WD = 1e-4, 0.01
TOLERANCE = 1e-6  # the new parameters' largest difference from torch's, relative

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("COCONET_LIB", os.path.join(ROOT, "build", "libcoconet.so"))
os.environ.setdefault("COCONET_HOME", ROOT)


def bucket_label():
    """The scattered tensors' bucket size this run asks for
    (COCONET_SCATTER_BUCKET; unset or 0: the runtime's 1024)."""
    v = os.environ.get("COCONET_SCATTER_BUCKET", "")
    return v if v not in ("", "0") else "1024 (the default)"


def gpt2_shapes(V=50257, T=1024, C=768, L=12):
    """GPT-2's parameters in nn.Module order (transformers' GPT2LMHeadModel;
    nn.Linear weights, [out, in])."""
    s = [(V, C), (T, C)]
    for _ in range(L):
        s += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,),
              (C, 4 * C), (C,)]
    return s + [(C,), (C,)]


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def build_only(ranks):
    import coconet
    from coconet import _session as S, programs
    cache = os.environ.get("COCONET_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "coconet")
    path = programs.write(programs.optimizer("adam", [count(s) for s in gpt2_shapes()], "FP32"),
                          "adam", os.path.join(cache, "torch-programs"))
    print(S.build(coconet.load(path, ranks=ranks), "paper"), flush=True)


def timed(torch, fn, iters):
    """(median ms between CUDA events around fn, median host ms of the call
    itself: where the first is near the second, the step is bound by the
    CPU's launching, not the GPU)"""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms, host = [], []
    for i in range(iters + 3):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        stop.record()
        stop.synchronize()
        if i >= 3:
            ms.append(start.elapsed_time(stop))
            host.append((t1 - t0) * 1e3)
    return statistics.median(ms), statistics.median(host)


def check_first_step(torch, dist, opt, params, P):
    """coconet's first step against all_reduce + torch.optim.AdamW (FP32,
    the same hyperparameters, one tensor at a time) from the same parameters
    (alike on every rank) and gradients: the largest difference of the new
    parameters, relative to their largest magnitude."""
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for r, p in zip(ref, params):
        r.grad = p.grad.detach().clone()
        if dist.is_initialized():
            dist.all_reduce(r.grad)
        r.grad.div_(P)
    torch.optim.AdamW(ref, lr=LR, weight_decay=WD, foreach=False).step()
    opt.step()
    diff = max(float((p.detach() - r.detach()).abs().max()) for p, r in zip(params, ref))
    return diff / max(float(r.detach().abs().max()) for r in ref)


def host_parts(torch, opt, iters):
    """The host's share of coconet's step, piece by piece (median ms of
    each, the GPU drained before): the gradients' identity check, the bound
    call's address guard, the runtime's call (its C side and the launch)."""
    b = opt._units[0].bound
    stream = torch.cuda.current_stream().cuda_stream
    pieces = {"gradients checked": lambda: opt._active(),
              "addresses guarded": lambda: [t.data_ptr() for t in b._guarded],
              "runtime call and launch": lambda: b._call(1, stream)}
    got = {}
    for name, fn in pieces.items():
        ms = []
        for _ in range(iters + 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
        got[name] = statistics.median(ms[3:])
    return got


def main(iters, out):
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    from coconet.torch import optim
    P = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    shapes = gpt2_shapes()
    N = sum(count(s) for s in shapes)
    g = torch.Generator(device="cuda").manual_seed(1 + rank)  # the gradients: a rank's own
    gp = torch.Generator(device="cuda").manual_seed(1)  # the parameters: alike on every rank

    def params():
        return [torch.nn.Parameter(torch.randn(s, device="cuda", generator=gp) * 0.02)
                for s in shapes]

    # coconet
    pc = params()
    opt = optim.AdamW(pc, lr=LR, weight_decay=WD)
    # each rank's gradient: a part the ranks share, at least 0.5 from 0, and its
    # own; the sign of their mean (Adam's first update) then never rounds away
    for p in pc:
        shared = torch.randn(p.shape, device="cuda", generator=gp)
        own = torch.randn(p.shape, device="cuda", generator=g)
        p.grad = shared.sign() * (0.5 + shared.abs()) + 0.1 * own  # the step moves it in
    error = check_first_step(torch, dist, opt, pc, P)
    coco = timed(torch, opt.step, iters)
    parts = host_parts(torch, opt, iters)
    u = opt._units[0]  # the same step as a plain call, every tensor checked at each call
    args = dict(g=[opt._grads[k] for k in u.keys], m=u.state["m"], v=u.state["v"],
                p=[opt._params[k] for k in u.keys], lr=LR, t=1.0, beta1=0.9, beta2=0.999,
                eps=1e-8, wd=WD, gscale=1.0 / P)
    checked = timed(torch, lambda: u.fn(args), iters)
    coco_state = sum(t.numel() for u in opt._units for t in u.state.values()) * 4

    # torch: flat gradient buckets' all_reduce, then fused AdamW
    pt = params()
    flat = torch.randn(N, device="cuda", generator=g)
    at = 0
    for p in pt:
        p.grad = flat[at:at + p.numel()].view(p.shape)
        at += p.numel()
    ropt = torch.optim.AdamW(pt, lr=LR, weight_decay=WD, fused=True)

    def allreduce():
        if dist.is_initialized():
            dist.all_reduce(flat)
        flat.div_(P)

    ar = timed(torch, allreduce, iters)
    adamw = timed(torch, ropt.step, iters)
    both = timed(torch, lambda: (allreduce(), ropt.step()), iters)
    torch_state = sum(s["exp_avg"].numel() + s["exp_avg_sq"].numel()
                      for s in ropt.state.values()) * 4

    vals = torch.tensor([coco, checked, ar, adamw, both, (error, 0)], device="cuda",
                        dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(vals, op=dist.ReduceOp.MAX)
    (coco, coco_h), (checked, checked_h), (ar, ar_h), (adamw, adamw_h), (both, both_h), \
        (error, _) = [tuple(r) for r in vals.tolist()]
    if rank == 0:
        dev = torch.cuda.get_device_name()
        lines = [
            "# Optimizer step, GPT-2 124M parameter shapes (%d tensors, %d elements), P = %d"
            % (len(shapes), N, P), "",
            "%s, torch %s; FP32; median of %d steps after 3, slowest rank; ms; "
            "scattered buckets of %s elements." % (
                dev, torch.__version__, iters,
                bucket_label()), "",
            "| step | ms | host ms (the call) | optimizer state on each rank |",
            "|---|---|---|---|",
            "| coconet.torch.optim.Adam (fuse(RS-Opt-AG), scattered) | %.3f | %.3f | %.1f MiB |"
            % (coco, coco_h, coco_state / 2 ** 20),
            "| the same program as a plain call, every tensor checked | %.3f | %.3f | |"
            % (checked, checked_h),
            "| all_reduce of the gradients (flat) + average | %.3f | %.3f | |" % (ar, ar_h),
            "| torch.optim.AdamW(fused=True).step | %.3f | %.3f | %.1f MiB |"
            % (adamw, adamw_h, torch_state / 2 ** 20),
            "| all_reduce + AdamW (DDP's step) | %.3f | %.3f | %.1f MiB |"
            % (both, both_h, torch_state / 2 ** 20), "",
            "Speed-up of coconet over all_reduce + AdamW: %.2f x; its state: 1/%.2f of AdamW's."
            % (both / coco, torch_state / max(coco_state, 1)),
            "coconet's first step against all_reduce + torch.optim.AdamW (one tensor at a time):"
            " new parameters within %.1e of the largest, on every rank (%s)."
            % (error, "within %.0e" % TOLERANCE if error <= TOLERANCE else "FAILED: over %.0e"
               % TOLERANCE),
            "The host's share of coconet's step on rank 0, ms: %s."
            % "; ".join("%s %.3f" % kv for kv in parts.items()),
            "ms: between CUDA events around the step; host ms: the call's own time on the CPU "
            "(near ms: the step waits on the CPU's launches).", ""]
        text = "\n".join(lines)
        print(text, flush=True)
        if out:
            with open(out, "w") as f:
                f.write(text)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0 if error <= TOLERANCE else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--ranks", type=int, default=1)
    a = ap.parse_args()
    if a.build_only:
        build_only(a.ranks)
    else:
        sys.exit(main(a.iters, a.out))
