"""bench/torch_sp_boundary.py: the sequence-parallel layer boundary of a
transformer, forward and backward, one process per GPU under torchrun:

    x [T, K/P] @ W1 [K/P, H] -> ReduceScatter over the tokens ->
    bias + dropout + residual + LayerNorm on [T/P, H] -> AllGather ->
    [T, H] @ W2 [H, K/P]

(a row-parallel projection, the norm between, the next column-parallel
one), T = B * S tokens, in each implementation:

  megatron          Megatron-style torch: matmuls, reduce_scatter_tensor,
                    torch's dropout and LayerNorm, all_gather_into_tensor
                    (examples/torch/gpt_tp.py's TorchRow and TorchColumn)
  megatron-compile  the same through torch.compile
  dtensor           parallelize_module: RowwiseParallel to Shard(0),
                    SequenceParallel on the norm, ColwiseParallel from
                    Shard(0), through torch.compile
  async-tp          the same with inductor's micro-pipelining on
                    (_micro_pipeline_tp, symmetric memory of the group)
  coconet           coconet.torch.tp: RowParallelLinearNorm (the projection
                    overlapped with one fused ReduceScatter-norm-AllGather
                    collective) then ColumnParallelLinear
  coconet-unfused   RowParallelLinear (sequence parallel) ending with a
                    ReduceScatter, torch's dropout and LayerNorm, then
                    ColumnParallelLinear gathering its input (AllGather
                    overlapped with the MatMul)

Each implementation's output and input gradient are first checked against
megatron's with dropout off (the largest relative difference, in the
row's notation; a miss makes the row's check "WRONG"); then timed as
bench/torch_mp.py times (ranks lined up on the GPU, 3 warm-up runs, the
median of --iters, the slowest rank's), forward + backward with dropout
--p-drop. Rows go to --out in bench/mp.sh's raw format
(layer|B|S|H|K|P|G|dtype|variant|ms|check|notation, layer
"sp_boundary"); an implementation the installed torch lacks, or that
fails on any rank, gives an NA row with the reason.

    torchrun --standalone --nproc_per_node=P bench/torch_sp_boundary.py \\
        --out rows.txt [--batch 8 16] [--seq 1024] [--hidden 3072]
        [--ratio 4] [--dtypes fp16 bf16] [--impls ...] [--iters 20]"""
import argparse
import importlib
import os
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
os.environ.setdefault("COCONET_LIB", os.path.join(ROOT, "build", "libcoconet.so"))
os.environ.setdefault("COCONET_HOME", ROOT)
from torch_mp import DTYPES, Bench  # noqa: E402  (the same directory)

import gpt_tp  # noqa: E402

IMPLS = ["megatron", "megatron-compile", "dtensor", "async-tp", "coconet", "coconet-unfused"]
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 6e-2}  # relative, against megatron


class Weights:
    """The boundary's whole weights, the same on every rank (one seed)."""

    def __init__(self, H, K, dtype, device):
        g = torch.Generator(device="cpu").manual_seed(7)

        def r(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g) * scale).to(device, dtype)
        self.w1, self.b1 = r(H, K, scale=K ** -0.5), r(H, scale=0.1)
        self.ln_w, self.ln_b = 1 + r(H, scale=0.1), r(H, scale=0.1)
        self.w2, self.b2 = r(K, H, scale=H ** -0.5), r(K, scale=0.1)

    def layer_norm(self):
        """torch's LayerNorm of the boundary's norm weights."""
        ln = nn.LayerNorm(self.w1.shape[0], device=self.w1.device, dtype=self.w1.dtype)
        with torch.no_grad():
            ln.weight.copy_(self.ln_w)
            ln.bias.copy_(self.ln_b)
        return ln


class Megatron(nn.Module):
    """forward(x [T, K/P], residual [T/P, H]) -> [T, K/P]"""

    def __init__(self, w, p):
        super().__init__()
        self.row = gpt_tp.TorchRow(w.w1, w.b1, True, None)
        self.ln = w.layer_norm()
        self.col = gpt_tp.TorchColumn(w.w2, w.b2, True, None)
        self.p = p

    def forward(self, x, residual):
        z = F.dropout(self.row(x), self.p) + residual
        return self.col(self.ln(z))


class Plain(nn.Module):
    """The boundary on whole tensors, for parallelize_module."""

    def __init__(self, w, p):
        super().__init__()
        H, K = w.w1.shape
        kw = dict(device=w.w1.device, dtype=w.w1.dtype)
        self.proj, self.ln, self.fc = nn.Linear(K, H, **kw), w.layer_norm(), nn.Linear(H, K, **kw)
        with torch.no_grad():
            for dst, src in ((self.proj.weight, w.w1), (self.proj.bias, w.b1),
                             (self.fc.weight, w.w2), (self.fc.bias, w.b2)):
                dst.copy_(src)
        self.p = p

    def forward(self, x, residual):
        z = F.dropout(self.proj(x), self.p) + residual
        return self.fc(self.ln(z))


def dtensor(w, p, micro_pipeline):
    """Plain made parallel by parallelize_module, compiled (with async-TP
    where micro_pipeline)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    inductor = importlib.import_module("torch._inductor.config")
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    model = parallelize_module(Plain(w, p), mesh, {
        "proj": RowwiseParallel(output_layouts=Shard(0)),
        "ln": SequenceParallel(sequence_dim=0),
        "fc": ColwiseParallel(input_layouts=Shard(0))})
    if micro_pipeline:
        symm = importlib.import_module("torch.distributed._symmetric_memory")
        enable = getattr(symm, "enable_symm_mem_for_group", None)
        if enable is not None:  # needed before torch 2.9
            enable(mesh.get_group().group_name)
    inductor._micro_pipeline_tp = micro_pipeline
    return torch.compile(model)


class Coconet(nn.Module):
    """coconet.torch.tp's layers: forward(x [T, K/P], residual) -> [T, K/P];
    fused: the residual whole [T, H], else [T/P, H]."""

    def __init__(self, w, p, fused):
        super().__init__()
        from coconet.torch import tp
        self.fused, self.p = fused, p
        if fused:
            self.row = tp.RowParallelLinearNorm.from_full(
                w.w1, w.b1, w.ln_w, w.ln_b, norm="layernorm", p_drop=p, sequence_parallel=True)
        else:
            self.row = tp.RowParallelLinear.from_full(w.w1, w.b1, sequence_parallel=True)
            self.ln = w.layer_norm()
        # fused: the norm's output whole on every rank; else each rank's tokens
        self.col = tp.ColumnParallelLinear.from_full(w.w2, w.b2, sequence_parallel=not fused)

    def forward(self, x, residual):
        if self.fused:
            return self.col(self.row(x, residual)[0])
        z = F.dropout(self.row(x), self.p) + residual
        return self.col(self.ln(z))


def make(impl, w, p):
    if impl == "megatron":
        return Megatron(w, p)
    if impl == "megatron-compile":
        return torch.compile(Megatron(w, p))
    if impl in ("dtensor", "async-tp"):
        return dtensor(w, p, impl == "async-tp")
    return Coconet(w, p, fused=impl == "coconet")


def inputs(bench, impl, T, H, K, dtype):
    """x [T, K/P] (this rank's features), the residual (whole for the fused
    coconet layer, else this rank's tokens) and the output's gradient; the
    same values in every implementation."""
    P, r = bench.size, bench.rank
    g = torch.Generator(device="cpu").manual_seed(11)
    x = torch.randn(T, K, generator=g)[:, r * K // P:(r + 1) * K // P]
    res = torch.randn(T, H, generator=g)
    gy = torch.randn(T, K, generator=g)[:, r * K // P:(r + 1) * K // P]
    if impl != "coconet":
        res = res[r * T // P:(r + 1) * T // P]
    x, res, gy = (t.contiguous().to(bench.dev, dtype) for t in (x, res, gy))
    return x.requires_grad_(), res, gy


def run(model, x, res, gy):
    x.grad = None
    y = model(x, res)
    y.backward(gy)
    return y


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def boundary(bench, b, dtype_name, impls):
    a = bench.args
    dtype = DTYPES[dtype_name]
    T, H = b * a.seq, a.hidden
    K = a.ratio * H
    shape = ("sp_boundary", b, a.seq, H, K, "-", dtype_name)
    w = Weights(H, K, dtype, bench.dev)
    want = None
    for impl in impls:
        why, err = None, None
        try:
            x, res, gy = inputs(bench, impl, T, H, K, dtype)
            y = run(make(impl, w, 0.0), x, res, gy)
            got = (y.detach(), x.grad.detach())
            if impl == "megatron":
                want = got
            elif want is not None:
                err = max(rel(got[0], want[0]), rel(got[1], want[1]))
            model = make(impl, w, a.p_drop)
            timed = bench.timed(lambda: run(model, x, res, gy))
        except Exception as e:  # noqa: BLE001 - reported as the row's NA
            why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            if bench.rank == 0:
                traceback.print_exc()
        if not bench.agree(why is None):
            why = why or "failed on another rank"
        if why is not None:
            bench.row(shape, impl, None, "unavailable: " + why, "NA")
            continue
        ok = err is None or err <= TOLERANCE[dtype]
        note = "fwd+bwd, p_drop %g; against megatron: %s" % (
            a.p_drop, "-" if err is None else "%.1e" % err)
        bench.row(shape, impl, timed, note, "measured" if ok else "WRONG")
        bench.free()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="raw rows, appended (rank 0)")
    ap.add_argument("--batch", type=int, nargs="*", default=[8, 16])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=3072)
    ap.add_argument("--ratio", type=int, default=4, help="K over H")
    ap.add_argument("--dtypes", nargs="*", default=["fp16", "bf16"], choices=sorted(DTYPES))
    ap.add_argument("--impls", nargs="*", default=IMPLS, choices=IMPLS)
    ap.add_argument("--p-drop", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=120, help="seconds of a collective")
    a = ap.parse_args()
    a.device = "cuda"
    if not torch.cuda.is_available():
        sys.exit("torch_sp_boundary.py: torch sees no CUDA device")
    bench = Bench(a)
    bench.name = "torch_sp_boundary"
    for b in a.batch:
        T, K = b * a.seq, a.ratio * a.hidden
        if T % bench.size or K % bench.size:
            sys.exit("torch_sp_boundary.py: T = %d tokens and K = %d must divide by P = %d"
                     % (T, K, bench.size))
    impls = ["megatron"] + [i for i in a.impls if i != "megatron"]  # the reference first
    for dtype in a.dtypes:
        for b in a.batch:
            boundary(bench, b, dtype, impls)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
