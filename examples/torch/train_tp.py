"""train_tp.py: tensor-parallel training of gpt2.py's GPT-2-style model
(gpt_tp.py) on the generated corpus, every rank of the group on the same
micro-batch, with coconet.torch.optim's AdamW stepping each rank's
parameters alone (--optimizer torch: torch.optim.AdamW):

  --impl coconet    coconet.torch.tp's layers (forward and backward as
                    coconet programs)
  --impl torch-tp   Megatron-style layers in torch.distributed collectives
  --impl torch      the plain model (gpt2.GPT), the same on every rank
  --impl torch-dtensor   the plain model made tensor-parallel by torch's
                    parallelize_module (ColwiseParallel, RowwiseParallel,
                    SequenceParallel), with torch.optim.AdamW
  --impl torch-async-tp  that compiled by torch.compile with async-TP on
                    (needs --sp)
  --sp              sequence parallelism (any impl but torch)
  --fused-norm      (coconet) each row-parallel projection with the LayerNorm
                    after it, in one fused collective (RowParallelLinearNorm)
  --compile         the model (forward and backward) through torch.compile
                    (fullgraph for coconet's layers: each pass one custom op);
                    the optimizer's step stays eager

    torchrun --nproc_per_node=P examples/torch/train_tp.py --impl coconet [--sp]
        [--steps 200] [--batch 8] [--seq 1024] [--amp bf16|none] [--model M] [--small]
        [--lr 1e-4] [--warmup 20] [--words 2048] [--csv FILE.csv]
        [--optimizer coconet|torch] [--compile]
    torchrun --nproc_per_node=P examples/torch/train_tp.py --check [--sp] [--impl ...]

Prints each step's loss and time. --check trains the plain model and the
tensor-parallel one side by side from the same weights on the same batches
(the plain one under torch.optim.AdamW), in FP32 with TF32 off (lr 5e-5,
batch 4 unless given), and fails unless their losses stay within --rtol
(1e-3) relative at every step. The same seeds give every run the same
initial weights and batches."""
import argparse
import copy
import importlib
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
import gpt_tp  # noqa: E402


def plain_model(args):
    torch.manual_seed(args.seed)
    cfg = dict(gpt2.SIZES["tiny" if args.small else args.model], ctx=max(args.seq, 1024))
    return gpt2.GPT(**cfg).cuda(), cfg["heads"]


DTENSOR = ("torch-dtensor", "torch-async-tp")  # torch's own tensor parallelism


def _has(module, names):
    """Does the installed torch have module (by import path) with names?"""
    try:
        m = importlib.import_module(module)
    except ImportError:
        return False
    return all(hasattr(m, n) for n in names)


def lacks(impl):
    """Why the installed torch cannot run `impl` (one line), or None."""
    need = []
    if impl in DTENSOR:
        need += [("torch.distributed.device_mesh", ["init_device_mesh"]),
                 ("torch.distributed.tensor", ["Replicate", "Shard"]),
                 ("torch.distributed.tensor.parallel",
                  ["parallelize_module", "ColwiseParallel", "RowwiseParallel",
                   "SequenceParallel", "PrepareModuleInput"])]
    if impl == "torch-async-tp":
        need += [("torch._inductor.config", ["_micro_pipeline_tp"]),
                 ("torch.distributed._symmetric_memory", ["enable_symm_mem_for_group"])]
    missing = ["%s.{%s}" % (m, ",".join(ns)) for m, ns in need if not _has(m, ns)]
    if not missing:
        return None
    return "train_tp.py: --impl %s needs %s, which torch %s lacks" % (
        impl, " and ".join(missing), torch.__version__)


def torch_parallel(plain, heads, args):
    """The plain model made tensor-parallel over every rank by torch's
    parallelize_module (gpt_tp.torch_parallel); for torch-async-tp compiled
    with async-TP on: inductor's micro-pipelining splits the sequence-
    parallel AllGather and ReduceScatter and overlaps their parts with the
    MatMuls, through symmetric memory of the mesh's group."""
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(plain.wte.weight.device.type, (dist.get_world_size(),))
    model = gpt_tp.torch_parallel(plain, heads, mesh, args.sp)
    if args.impl == "torch-async-tp":
        inductor = importlib.import_module("torch._inductor.config")
        symm = importlib.import_module("torch.distributed._symmetric_memory")
        inductor._micro_pipeline_tp = True
        symm.enable_symm_mem_for_group(mesh.get_group().group_name)
        model = torch.compile(model)
    return model


def parallel(plain, heads, args):
    if args.impl == "torch":
        return plain
    if args.impl in DTENSOR:
        return torch_parallel(plain, heads, args)
    return gpt_tp.TPGPT(plain, heads, impl=args.impl, sequence_parallel=args.sp,
                        fused_norm=args.fused_norm)


def own_group():
    """This rank alone as a process group (None without torch.distributed).
    new_group is collective: every rank makes every rank's group, in the
    same order, and keeps its own."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    mine = None
    for r in range(dist.get_world_size()):
        g = dist.new_group(ranks=[r])
        if r == dist.get_rank():
            mine = g
    return mine


def optimizer(model, args, kind):
    """AdamW over the model's parameters: coconet.torch.optim's (kind
    "coconet") or torch's. Under tensor parallelism without data
    parallelism each rank's parameters are its own shards, so coconet's
    data-parallel group is this rank alone: over the tensor-parallel group
    it would broadcast rank 0's shards and average shards of different
    weights. overlap=False: step() must read the gradients after
    sync_sequence_parallel_grads has summed those of the parameters applied
    to each rank's tokens, which an overlapped step would have taken during
    the backward pass, before that sum."""
    hyper = dict(lr=args.lr, betas=(0.9, args.beta2), weight_decay=args.wd)
    if kind == "torch":
        return torch.optim.AdamW(model.parameters(), foreach=False, **hyper)
    from coconet.torch import optim
    return optim.AdamW(model.parameters(), group=own_group(), overlap=False, **hyper)


def step(model, opt, x, y, args, amp, lr):
    """One training step; the loss (a float: each rank computes the same)."""
    for pg in opt.param_groups:
        pg["lr"] = lr
    opt.zero_grad(set_to_none=False)  # coconet's: backward accumulates in its arena
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    gpt_tp.sync_sequence_parallel_grads(model)
    opt.step()
    return float(loss.detach())


def train(args):
    rank, P = gpt2.setup()
    plain, heads = plain_model(args)
    twin = copy.deepcopy(plain) if args.check else None
    model = parallel(plain, heads, args)
    amp = args.amp == "bf16" and not args.check
    opt = optimizer(model, args, args.optimizer)
    if args.impl == "coconet":  # the programs a step calls, built together ahead of it
        from coconet.torch import tp
        tp.prebuild(model, args.batch * args.seq, dtype=torch.bfloat16 if amp else None,
                    optimizer=opt if args.optimizer == "coconet" else None)
    if args.compile and args.impl != "torch-async-tp":  # (that one is compiled already)
        model = torch.compile(model, fullgraph=args.impl == "coconet")
    ref_opt = optimizer(twin, args, "torch") if twin is not None else None
    vocab = plain.wte.weight.shape[0]
    data = gpt2.corpus(args.tokens, vocab, seed=args.seed, words=args.words or None)
    if not amp:  # FP32 throughout: no TF32 rounding of the MatMuls' inputs
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if rank == 0:
        print("model %s; impl %s%s%s%s, %s AdamW, P = %d, micro-batch %d x %d tokens, %s%s"
              % ("tiny" if args.small else args.model,
                 args.impl, " + sequence parallelism" if args.sp else "",
                 " + fused norms" if args.fused_norm else "",
                 " (torch.compile)" if args.compile else "", args.optimizer, P, args.batch,
                 args.seq, "bf16 autocast" if amp else "fp32, no TF32",
                 "; checked against the plain model" if args.check else ""), flush=True)
    rows, worst = [], 0.0
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for s in range(1, args.steps + 1):
        x, y = gpt2.batches(data, args.batch, args.seq, 0, 1, s)  # the same on every rank
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        lr = args.lr * min(1.0, s / args.warmup) if args.warmup > 0 else args.lr
        ev[0].record()
        loss = step(model, opt, x, y, args, amp, lr)
        ev[1].record()
        ev[1].synchronize()
        ms = ev[0].elapsed_time(ev[1])
        ref = step(twin, ref_opt, x, y, args, amp, lr) if twin is not None else None
        rel = abs(loss - ref) / abs(ref) if ref is not None else None
        worst = max(worst, rel or 0.0)
        rows.append((s, loss, ms, ref))
        if rank == 0 and (s <= 5 or s % args.every == 0 or s == args.steps):
            print("step %4d  loss %.6f  step %.2f ms%s" % (
                s, loss, ms, "" if ref is None else "  plain %.6f  rel %.1e" % (ref, rel)),
                flush=True)
    return report(args, rank, rows, worst)


def report(args, rank, rows, worst):
    ok = True
    if rank == 0:
        tail = rows[len(rows) // 4:] or rows
        print("median step over steps %d..%d: %.2f ms; peak memory %.2f GiB"
              % (tail[0][0], tail[-1][0], sorted(r[2] for r in tail)[len(tail) // 2],
                 torch.cuda.max_memory_allocated() / 2 ** 30), flush=True)
        if args.check:
            ok = worst <= args.rtol
            print("check: largest relative difference from the plain model %.2e over %d "
                  "steps: %s" % (worst, len(rows), "PASS" if ok else "FAIL"), flush=True)
        if args.csv:
            gpt2.write_csv(args.csv, ["step", "loss", "step_ms", "plain_loss"], rows)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if ok else 1


def check_args(ap, args):
    """Refuses what the options or the installed torch cannot run."""
    if args.sp and args.impl == "torch":
        ap.error("--sp needs a tensor-parallel --impl")
    if args.fused_norm and args.impl != "coconet":
        ap.error("--fused-norm needs --impl coconet")
    if args.impl in DTENSOR:
        if args.optimizer == "coconet":
            ap.error("--optimizer coconet takes plain tensors, not the DTensor parameters "
                     "of --impl %s: use --optimizer torch" % args.impl)
        if args.impl == "torch-async-tp" and not args.sp:
            ap.error("--impl torch-async-tp needs --sp: async-TP overlaps the sequence-"
                     "parallel AllGather and ReduceScatter with the MatMuls")
        if "WORLD_SIZE" not in os.environ:
            ap.error("--impl %s needs torchrun (its DeviceMesh is over the process group)"
                     % args.impl)
        why = lacks(args.impl)
        if why:
            sys.exit(why)
    if args.optimizer is None:
        args.optimizer = "torch" if args.impl in DTENSOR else "coconet"


def parse(argv=None):
    """The options, checked (an error exits, naming the option)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", default="coconet",
                    choices=["coconet", "torch-tp", "torch"] + list(DTENSOR))
    ap.add_argument("--sp", action="store_true", help="sequence parallelism")
    ap.add_argument("--fused-norm", action="store_true",
                    help="row-parallel projections fused with the LayerNorm after them")
    ap.add_argument("--optimizer", choices=["coconet", "torch"],
                    help="AdamW of coconet.torch.optim (the default), or torch.optim.AdamW "
                         "(the default for DTensor parameters: --impl torch-dtensor and "
                         "torch-async-tp)")
    ap.add_argument("--compile", action="store_true",
                    help="the model through torch.compile (the step eager)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--amp", default="bf16", choices=["bf16", "none"])
    ap.add_argument("--tokens", type=int, default=1 << 21, help="corpus size")
    ap.add_argument("--words", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=10, help="print every this many steps")
    ap.add_argument("--model", default="gpt2", choices=sorted(gpt2.SIZES),
                    help="the model's sizes (gpt2.SIZES: gpt2 124M, gpt2-medium 355M, "
                         "gpt-1.5b)")
    ap.add_argument("--small", action="store_true", help="--model tiny: 4 layers, 256 wide")
    ap.add_argument("--csv", help="CSV of step, loss, step_ms, plain_loss (rank 0)")
    args = ap.parse_args(argv)
    if args.batch is None:
        args.batch = 4 if args.check else 8
    if args.lr is None:
        args.lr = 5e-5 if args.check else 1e-4
    check_args(ap, args)
    return args


def main():
    sys.exit(train(parse()))


if __name__ == "__main__":
    main()
