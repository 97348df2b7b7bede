"""train_dp.py: data-parallel training of a GPT-2-style model (124M
parameters at the default sizes, examples/torch/gpt2.py) on a generated
corpus, with coconet's fused optimizer or PyTorch's:

  --optimizer coconet       coconet.torch.optim.AdamW: no DDP; fuse(RS-Opt-AG)
                            over the gradients where autograd left them (in
                            coconet's arena), 1/P of the state; by default each
                            bucket (--bucket-mb) stepped during the backward
                            pass as soon as its gradients are final
                            (overlap=True; --no-overlap: one step after it);
                            --overlap-param-gather: each bucket's all-gather
                            deferred to its first use in the next forward
  --optimizer torch         DDP (gradient all_reduce in buckets, overlapped with
                            the backward) + torch.optim.AdamW(fused=True)
  --optimizer coconet-lamb  coconet.torch.optim.LAMB
  --optimizer torch-lamb    DDP + LAMB written with torch ops (examples/lamb.coco's
                            formula, one trust ratio over all the parameters)
  --optimizer torch-foreach DDP + AdamW(foreach=True): the same optimizer as
                            `torch` with other roundings, a control for how far
                            two correct runs' loss curves drift apart
  --optimizer torch-zero    DDP + ZeroRedundancyOptimizer(AdamW(fused=True)):
                            1/P of the state, each rank steps its part after
                            the backward and broadcasts it (its overlap_with_ddp
                            is not offered: its functional AdamW ignores the
                            learning rate's schedule and skips the first steps)
  --optimizer torch-fsdp2   FSDP2 fully_shard on each block and the model,
                            reshard_after_forward=False (ZeRO-2: gradients
                            reduce-scattered in the backward, parameters
                            gathered once a step) + AdamW(fused=True) on the
                            shards

    torchrun --nproc_per_node=P examples/torch/train_dp.py --optimizer coconet \\
        [--model gpt2|gpt2-medium|gpt-1.5b] [--steps 200] [--batch 8] [--seq 1024]
        [--amp bf16|none] [--csv FILE.csv]
        [--warmup 20] [--words 2048] [--lr 1e-4] [--beta2 0.95] [--accum K]
        [--no-overlap] [--bucket-mb MB] [--overlap-param-gather]
    python3 examples/torch/train_dp.py --compare A.csv B.csv   (the loss curves)
    torchrun ... train_dp.py --optimizer X --max-batch          (largest micro-batch that fits)

Prints, per step, the loss (mean over the ranks), the step's time and the
optimizer's time (CUDA events from the end of the backward to the end of
step(): coconet's plain step includes its gradient reduction; overlapped,
only what the backward pass left; torch's AdamW step never does, DDP
reduces during the backward). With --accum K a step is K micro-batches, the
gradients communicated at the last one only (DDP's no_sync, coconet's
opt.no_sync()). The peak memory counts coconet's arena (its own device
allocation: coconet.torch.arena_bytes) besides torch's allocations. The
same seeds give both runs the same initial weights and batches."""
import argparse
import contextlib
import csv
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("COCONET_LIB", os.path.join(ROOT, "build", "libcoconet.so"))
os.environ.setdefault("COCONET_HOME", ROOT)

import gpt2  # noqa: E402


class TorchLAMB(torch.optim.Optimizer):
    """examples/lamb.coco's LAMB in torch ops: Adam's moments, u = m^/(sqrt(v^)
    + eps) + wd p, one trust ratio ||p|| / ||u|| over all the parameters (1
    where either is 0), p -= lr ratio u."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for pg in self.param_groups:
            ps = [p for p in pg["params"] if p.grad is not None]
            b1, b2 = pg["betas"]
            us = []
            for p in ps:
                s = self.state[p]
                if not s:
                    s["step"], s["m"], s["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                s["step"] += 1
                t = s["step"]
                s["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                s["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                us.append((s["m"] / (1 - b1 ** t)) / ((s["v"] / (1 - b2 ** t)).sqrt() + pg["eps"])
                          + pg["weight_decay"] * p)
            r1 = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in ps]))
            r2 = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(u) for u in us]))
            ratio = torch.where((r1 > 0) & (r2 > 0), r1 / r2, torch.ones_like(r1))
            for p, u in zip(ps, us):
                p.sub_(pg["lr"] * ratio * u)


def model_config(args):
    """gpt2.GPT's sizes for --model (--small: tiny)."""
    return dict(gpt2.SIZES["tiny" if args.small else args.model], ctx=max(args.seq, 1024))


def build(args, P):
    """(the model, what runs its forward: DDP, FSDP2 or the model, the
    optimizer), from --seed's weights on this process's GPU."""
    torch.manual_seed(args.seed)
    return wrap(gpt2.GPT(**model_config(args)).cuda(), args, P)


def wrap(model, args, P):
    """(model, net, opt) for --optimizer (the module's documentation)."""
    lamb = args.optimizer.endswith("lamb")
    kw = dict(lr=args.lr, betas=(0.9, args.beta2), weight_decay=args.wd)
    if args.optimizer.startswith("coconet"):
        from coconet.torch import optim
        kw["overlap"] = not args.no_overlap
        if lamb:
            opt = optim.LAMB(model.parameters(), **kw)
        else:
            opt = optim.AdamW(model.parameters(), bucket_mb=args.bucket_mb,
                              overlap_param_gather=args.overlap_param_gather, **kw)
        return model, model, opt
    if args.optimizer == "torch-fsdp2":
        from torch.distributed.fsdp import fully_shard
        # ZeRO-2: each block's parameters gathered once a step and kept from
        # the forward to the backward, gradients reduce-scattered in the backward
        for block in model.h:
            fully_shard(block, reshard_after_forward=False)
        fully_shard(model, reshard_after_forward=False)
        return model, model, torch.optim.AdamW(model.parameters(), fused=True, **kw)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if P > 1 else model
    if args.optimizer == "torch-zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return model, ddp, ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, fused=True, **kw)
    fused = args.optimizer != "torch-foreach"  # the control: the same AdamW, other roundings
    opt = (TorchLAMB(model.parameters(), **kw) if lamb else
           torch.optim.AdamW(model.parameters(), fused=fused, foreach=not fused, **kw))
    return model, ddp, opt


def arena_gib(args):
    """coconet's arena (a device allocation torch does not count), GiB."""
    if not args.optimizer.startswith("coconet"):
        return 0.0
    import coconet.torch as ct
    return ct.arena_bytes()["size"] / 2 ** 30


def no_sync(opt, net, last):
    """Nothing communicated during this backward (all micro-batches but the
    last): coconet's optimizer's no_sync, else DDP's."""
    if last:
        return contextlib.nullcontext()
    if hasattr(opt, "no_sync"):
        return opt.no_sync()
    if hasattr(net, "set_requires_gradient_sync"):  # FSDP2
        return _fsdp_no_sync(net)
    return net.no_sync() if hasattr(net, "no_sync") else contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_no_sync(net):
    net.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        net.set_requires_gradient_sync(True)


def load(args, data, rank, P, step):
    """The step's --accum micro-batches, on the GPU."""
    out = []
    for k in range(args.accum):
        x, y = gpt2.batches(data, args.batch, args.seq, rank, P, step * args.accum + k)
        out.append((x.cuda(non_blocking=True), y.cuda(non_blocking=True)))
    return out


def micro_batches(args, batches, net, opt, vocab, amp):
    """Forward and backward of each micro-batch; all but the last under
    no_sync (nothing communicated). The mean loss, detached."""
    total = 0.0
    for k, (x, y) in enumerate(batches):
        with no_sync(opt, net, last=k == len(batches) - 1):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logits = net(x)
            loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1)) / args.accum
            loss.backward()
        total = total + loss.detach()
    return total


def train(args):
    rank, P = gpt2.setup()
    model, net, opt = build(args, P)
    vocab = model.wte.weight.shape[0]
    data = gpt2.corpus(args.tokens, vocab, seed=args.seed, words=args.words or None)
    amp = args.amp == "bf16"
    if not amp:  # FP32 throughout: no TF32 rounding of the MatMuls' inputs
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    nparam = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print("model: %s, %d parameters; optimizer %s; P = %d, micro-batch %d x %d tokens, %s"
              % ("tiny" if args.small else args.model, nparam, args.optimizer, P, args.batch,
                 args.seq, "bf16 autocast" if amp else "fp32, no TF32"), flush=True)
    rows = []
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    coconet = args.optimizer.startswith("coconet")
    for step in range(1, args.steps + 1):
        batches = load(args, data, rank, P, step)
        for pg in opt.param_groups:  # the learning rate's linear warm-up
            pg["lr"] = args.lr * min(1.0, step / args.warmup) if args.warmup > 0 else args.lr
        ev[0].record()
        # coconet: zeroed in place in its arena (set to None, the next backward's
        # gradients would be copied in)
        opt.zero_grad(set_to_none=not coconet)
        loss = micro_batches(args, batches, net, opt, vocab, amp)
        ev[1].record()
        opt.step()
        ev[2].record()
        ev[2].synchronize()
        l = loss
        if dist.is_initialized():
            dist.all_reduce(l)
        l = float(l) / P
        step_ms, opt_ms = ev[0].elapsed_time(ev[2]), ev[1].elapsed_time(ev[2])
        rows.append((step, l, step_ms, opt_ms))
        if rank == 0 and (step <= 5 or step % args.every == 0 or step == args.steps):
            print("step %4d  loss %.6f  step %.2f ms  optimizer %.2f ms" % (step, l, step_ms,
                                                                            opt_ms), flush=True)
    if rank == 0:
        tail = rows[len(rows) // 4:] or rows
        med = lambda k: sorted(r[k] for r in tail)[len(tail) // 2]  # noqa: E731
        arena = arena_gib(args)
        print("median over steps %d..%d: step %.2f ms, optimizer %.2f ms; peak memory %.2f GiB "
              "(torch's %.2f + coconet's arena %.2f)"
              % (tail[0][0], tail[-1][0], med(2), med(3),
                 torch.cuda.max_memory_allocated() / 2 ** 30 + arena,
                 torch.cuda.max_memory_allocated() / 2 ** 30, arena), flush=True)
        if args.csv:
            gpt2.write_csv(args.csv, ["step", "loss", "step_ms", "optimizer_ms"], rows)
    if dist.is_initialized():
        dist.destroy_process_group()


def max_batch(args):
    """The largest micro-batch (doubling, then bisecting) whose training step
    fits in the GPU's memory with this optimizer; a step of each."""
    rank, P = gpt2.setup()
    model, net, opt = build(args, P)
    vocab = model.wte.weight.shape[0]
    data = gpt2.corpus(max(args.tokens, 64 * args.seq), vocab, seed=args.seed,
                       words=args.words or None)

    def fits(b):
        ok = torch.ones(1, device="cuda")
        try:
            x, y = gpt2.batches(data, b, args.seq, rank, P, 1)
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
                loss = F.cross_entropy(net(x.cuda()).float().view(-1, vocab), y.cuda().view(-1))
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            ok.zero_()
        torch.cuda.empty_cache()
        if dist.is_initialized():
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        return bool(ok.item())

    lo, hi = 0, 1
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if rank == 0:
        print("largest micro-batch with %s at seq %d: %d" % (args.optimizer, args.seq, lo))


def compare(a, b):
    def read(path):
        with open(path) as f:
            return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}
    la, lb = read(a), read(b)
    steps = sorted(set(la) & set(lb))
    worst = max(abs(la[s] - lb[s]) / abs(lb[s]) for s in steps)
    at = max(steps, key=lambda s: abs(la[s] - lb[s]) / abs(lb[s]))
    print("%d steps compared: largest relative loss difference %.3e (step %d: %.6f vs %.6f)%s"
          % (len(steps), worst, at, la[at], lb[at], "" if worst <= 1e-3 else "  > 1e-3"))
    return 0 if worst <= 1e-3 else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--optimizer", default="coconet",
                    choices=["coconet", "torch", "torch-foreach", "torch-zero", "torch-fsdp2",
                             "coconet-lamb", "torch-lamb"])
    ap.add_argument("--model", default="gpt2", choices=sorted(gpt2.SIZES),
                    help="the model's sizes (gpt2.SIZES: gpt2 124M, gpt2-medium 355M, "
                         "gpt-1.5b)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--beta2", type=float, default=0.95,
                    help="the second moment's decay (GPT training's 0.95: fewer loss spikes)")
    ap.add_argument("--warmup", type=int, default=20,
                    help="steps of the learning rate's linear warm-up (0: none)")
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--amp", default="bf16", choices=["bf16", "none"])
    ap.add_argument("--tokens", type=int, default=1 << 21, help="corpus size")
    ap.add_argument("--words", type=int, default=2048,
                    help="tokens of the vocabulary the corpus uses (0: all; gpt2.corpus)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=10, help="print every this many steps")
    ap.add_argument("--small", action="store_true", help="--model tiny: 4 layers, 256 wide")
    ap.add_argument("--csv", help="CSV of step, loss, step_ms, optimizer_ms (rank 0)")
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches a step (gradient accumulation)")
    ap.add_argument("--no-overlap", action="store_true",
                    help="coconet: one step after the backward pass, not buckets during it")
    ap.add_argument("--bucket-mb", type=float, default=25,
                    help="coconet, overlapped: the buckets' size in MiB of gradients")
    ap.add_argument("--overlap-param-gather", action="store_true",
                    help="coconet AdamW, overlapped: each bucket's all-gather of the updated "
                         "parameters deferred to its first use in the next forward")
    ap.add_argument("--max-batch", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("A.csv", "B.csv"))
    a = ap.parse_args()
    if a.optimizer in ("torch-zero", "torch-fsdp2") and "WORLD_SIZE" not in os.environ:
        ap.error("--optimizer %s needs torchrun (its process group), at P = 1 too" % a.optimizer)
    if a.compare:
        sys.exit(compare(*a.compare))
    max_batch(a) if a.max_batch else train(a)
