"""gpt_tp.py: gpt2.py's GPT-2-style model with Megatron-LM's tensor
parallelism, with or without sequence parallelism, its linear layers either
coconet's (coconet.torch.tp: forward and backward as coconet programs) or
Megatron-style ones written with torch.distributed collectives (the
baseline). Made from a plain gpt2.GPT, so that both start from its weights.

In each block the QKV and MLP-up projections are column-parallel (each rank
holds its heads' q, k and v rows, and its quarter of the MLP's hidden
units), the attention-output and MLP-down projections row-parallel;
attention is F.scaled_dot_product_attention on each rank's heads.
Activations are [sequence, batch, width] (Megatron's order). With sequence
parallelism the residual stream and the LayerNorms hold each rank's part of
the sequence: the column-parallel layers gather it (AllGather, overlapped
with the MatMul in coconet's), the row-parallel ones reduce-scatter back;
the LayerNorms' gradients, partial on each rank, are summed by
sync_sequence_parallel_grads after the backward. Without it every rank
holds the whole stream and the row-parallel layers all-reduce.

With fused_norm (coconet's layers) each row-parallel projection is a
RowParallelLinearNorm with the LayerNorm after it: attention-output with
ln_2, MLP-down with the next block's ln_1 (the last block's: ln_f), bias,
residual and norm in one fused ReduceScatter-norm-AllGather collective
(sequence_parallel then runs the norm on each rank's tokens inside it; the
stream between the layers is whole on every rank).

The embeddings and the head (tied to the token embedding) are whole on
every rank, each computing the same logits and loss (the vocabulary is not
split).

torch_parallel(plain, heads, mesh, sequence_parallel) is torch's own
tensor parallelism of the same layout, the baseline of parallelize_module:
the plain gpt2.GPT made tensor-parallel in place with ColwiseParallel,
RowwiseParallel and (sequence parallelism) SequenceParallel, its
activations DTensors between the collectives."""
import types

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def _ranks(group):
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _gather0(x, group):
    """Every rank's x joined along the first dimension."""
    _, P = _ranks(group)
    if P == 1:
        return x
    out = torch.empty((P * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _slice0(x, group):
    r, P = _ranks(group)
    k = x.shape[0] // P
    return x[r * k:(r + 1) * k].contiguous()


def _reduce_scatter0(x, group):
    _, P = _ranks(group)
    if P == 1:
        return x
    out = torch.empty((x.shape[0] // P,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


def _all_reduce(x, group):
    if _ranks(group)[1] > 1:
        x = x.contiguous()
        dist.all_reduce(x, group=group)
    return x


class _Collective(torch.autograd.Function):
    """A collective whose backward is another: forward(x, fwd, bwd, group)."""

    @staticmethod
    def forward(ctx, x, fwd, bwd, group):
        ctx.bwd, ctx.group = bwd, group
        return fwd(x.clone() if fwd is _all_reduce else x, group)

    @staticmethod
    def backward(ctx, g):
        return ctx.bwd(g.clone() if ctx.bwd is _all_reduce else g, ctx.group), None, None, None


def _ident(x, group):
    return x


def scatter_sequence(x, group):
    """This rank's part of the sequence; backward gathers (whole grads)."""
    return _Collective.apply(x, _slice0, _gather0, group)


def gather_sequence(x, group):
    """The whole sequence, for a computation every rank repeats (the head);
    backward: this rank's part of the (identical) gradient."""
    return _Collective.apply(x, _gather0, _slice0, group)


# ---- Megatron-style layers in torch.distributed collectives (the baseline) ----

class TorchColumn(nn.Module):
    def __init__(self, weight, bias, sequence_parallel, group):
        super().__init__()
        r, P = _ranks(group)
        k = weight.shape[0] // P
        self.weight = nn.Parameter(weight[r * k:(r + 1) * k].clone())
        self.bias = nn.Parameter(bias[r * k:(r + 1) * k].clone())
        self.sp, self.group = sequence_parallel, group

    def forward(self, x):
        if self.sp:
            x = _Collective.apply(x, _gather0, _reduce_scatter0, self.group)
        else:
            x = _Collective.apply(x, _ident, _all_reduce, self.group)
        return F.linear(x, self.weight, self.bias)


class TorchRow(nn.Module):
    def __init__(self, weight, bias, sequence_parallel, group):
        super().__init__()
        r, P = _ranks(group)
        k = weight.shape[1] // P
        self.weight = nn.Parameter(weight[:, r * k:(r + 1) * k].clone())
        self.bias = nn.Parameter(bias.clone())
        self.sp, self.group = sequence_parallel, group

    def forward(self, x):
        y = F.linear(x, self.weight)
        if self.sp:
            y = _Collective.apply(y, _reduce_scatter0, _gather0, self.group)
        else:
            y = _Collective.apply(y, _all_reduce, _ident, self.group)
        return y + self.bias  # under sequence parallelism: partial grads, summed after


def linear(kind, impl, weight, bias, sequence_parallel, group):
    """A column- or row-parallel layer holding this rank's part of the
    whole weight ([out, in]) and bias."""
    if impl == "coconet":
        from coconet.torch import tp
        cls = tp.ColumnParallelLinear if kind == "column" else tp.RowParallelLinear
        return cls.from_full(weight, bias, sequence_parallel=sequence_parallel, group=group)
    cls = TorchColumn if kind == "column" else TorchRow
    layer = cls(weight, bias, sequence_parallel, group)
    if kind == "row" and sequence_parallel:
        layer.bias.sequence_parallel = True
    return layer


def qkv_rows(width, ranks):
    """The rows of GPT-2's c_attn weight ([q; k; v], each width x width),
    reordered so that rank r's slice holds its heads' q, k and v rows."""
    k = width // ranks
    order = []
    for r in range(ranks):
        for part in range(3):
            order += range(part * width + r * k, part * width + (r + 1) * k)
    return torch.tensor(order)


class TPBlock(nn.Module):
    def __init__(self, plain, heads, impl, sequence_parallel, group):
        super().__init__()
        _, P = _ranks(group)
        width = plain.ln_1.weight.shape[0]
        if heads % P:
            raise ValueError("gpt_tp: %d heads over %d ranks" % (heads, P))
        self.heads, self.width, self.sp = heads // P, width, sequence_parallel
        self.ln_1, self.ln_2 = plain.ln_1, plain.ln_2
        rows = qkv_rows(width, P)
        self.c_attn = linear("column", impl, plain.c_attn.weight.data[rows],
                             plain.c_attn.bias.data[rows], sequence_parallel, group)
        self.c_proj = linear("row", impl, plain.c_proj.weight.data, plain.c_proj.bias.data,
                             sequence_parallel, group)
        self.c_fc = linear("column", impl, plain.c_fc.weight.data, plain.c_fc.bias.data,
                           sequence_parallel, group)
        self.mlp_proj = linear("row", impl, plain.mlp_proj.weight.data,
                               plain.mlp_proj.bias.data, sequence_parallel, group)
        if sequence_parallel:
            for p in list(self.ln_1.parameters()) + list(self.ln_2.parameters()):
                p.sequence_parallel = True

    def heads_out(self, x):
        """Attention on this rank's heads: [S, B, width / P]."""
        qkv = self.c_attn(x)  # [S, B, 3 width / P]
        S, B, _ = qkv.shape
        q, k, v = (t.reshape(S, B, self.heads, -1).permute(1, 2, 0, 3)
                   for t in qkv.split(qkv.shape[-1] // 3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.permute(2, 0, 1, 3).reshape(S, B, -1)

    def attention(self, x):
        return self.c_proj(self.heads_out(x))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def linear_norm(proj, ln, sequence_parallel, group):
    """coconet's RowParallelLinearNorm of a projection and the LayerNorm
    after it (nn.Linear, nn.LayerNorm)."""
    from coconet.torch import tp
    return tp.RowParallelLinearNorm.from_full(
        proj.weight.data, proj.bias.data, ln.weight.data, ln.bias.data, norm="layernorm",
        p_drop=0.0, eps=ln.eps, sequence_parallel=sequence_parallel, group=group)


class TPGPT(nn.Module):
    """gpt2.GPT's model, tensor-parallel over `group`, from a plain one
    (its weights taken, the plain model not to be used after)."""

    def __init__(self, plain, heads, impl="coconet", sequence_parallel=False, group=None,
                 fused_norm=False):
        super().__init__()
        if fused_norm and impl != "coconet":
            raise ValueError("gpt_tp: fused_norm needs impl='coconet'")
        self.group, self.sp, self.fused = group, sequence_parallel and not fused_norm, fused_norm
        self.wte, self.wpe, self.ln_f = plain.wte, plain.wpe, plain.ln_f
        self.h = nn.ModuleList(TPBlock(b, heads, impl, self.sp, group) for b in plain.h)
        if self.sp:
            for p in self.ln_f.parameters():
                p.sequence_parallel = True
        if fused_norm:
            self._fuse(plain, sequence_parallel, group)

    def _fuse(self, plain, sp, group):
        """Each block's projections with the LayerNorm after them."""
        after = [b.ln_1 for b in plain.h[1:]] + [plain.ln_f]
        self.ln_0 = plain.h[0].ln_1
        for b, pb, ln in zip(self.h, plain.h, after):
            b.proj_norm = linear_norm(pb.c_proj, pb.ln_2, sp, group)
            b.mlp_norm = linear_norm(pb.mlp_proj, ln, sp, group)
            del b.c_proj, b.mlp_proj, b.ln_1, b.ln_2
        del self.ln_f

    def _fused_blocks(self, x):
        h, z = self.ln_0(x), x
        for b in self.h:
            h, z = b.proj_norm(b.heads_out(h), z)
            h, z = b.mlp_norm(F.gelu(b.c_fc(h), approximate="tanh"), z)
        return h  # the last norm's: ln_f's

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = (self.wte(idx) + self.wpe(pos)).transpose(0, 1)  # [S, B, width]
        if self.fused:
            return F.linear(self._fused_blocks(x), self.wte.weight).transpose(0, 1)
        if self.sp:
            x = scatter_sequence(x, self.group)
        for b in self.h:
            x = b(x)
        x = self.ln_f(x)
        if self.sp:
            x = gather_sequence(x, self.group)
        return F.linear(x, self.wte.weight).transpose(0, 1)  # [B, S, vocab]


def sync_sequence_parallel_grads(model, group=None):
    """Sums over the ranks the gradients of the parameters applied to each
    rank's part of the sequence (LayerNorms, the baseline's row biases)."""
    if _ranks(group)[1] == 1:
        return
    for p in model.parameters():
        if getattr(p, "sequence_parallel", False) and p.grad is not None:
            dist.all_reduce(p.grad, group=group)


# ---- torch's parallelize_module on the plain model (the DTensor baseline) ----

def _local_attention(block, x):
    """gpt2.Block.attention on this rank's heads: c_attn's output is this
    rank's q, k and v (ColwiseParallel's local tensor), c_proj reduces."""
    qkv = block.c_attn(x)
    B, T, _ = qkv.shape
    q, k, v = (t.view(B, T, block.heads, -1).transpose(1, 2)
               for t in qkv.split(qkv.shape[-1] // 3, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return block.c_proj(y.transpose(1, 2).reshape(B, T, -1))


def _torch_plan(layers, sequence_parallel):
    """parallelize_module's plan for gpt2.GPT ([batch, sequence, width])."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    sp, seq = sequence_parallel, Shard(1)
    plan = {}
    for i in range(layers):
        for name in ("c_attn", "c_fc"):  # with sp: the tokens gathered first
            plan["h.%d.%s" % (i, name)] = ColwiseParallel(input_layouts=seq) if sp \
                else ColwiseParallel()
        for name in ("c_proj", "mlp_proj"):  # with sp: reduce-scattered to the tokens
            plan["h.%d.%s" % (i, name)] = RowwiseParallel(output_layouts=seq) if sp \
                else RowwiseParallel()
        if sp:
            plan["h.%d.ln_1" % i] = SequenceParallel()
            plan["h.%d.ln_2" % i] = SequenceParallel()
    if sp:  # the whole embedding's output sliced; the head given every token
        plan["h.0"] = PrepareModuleInput(input_layouts=Replicate(), desired_input_layouts=seq,
                                         use_local_output=True)
        plan["ln_f"] = SequenceParallel()
        plan["lm_head"] = PrepareModuleInput(input_layouts=seq,
                                             desired_input_layouts=Replicate(),
                                             use_local_output=True)
    return plan


def torch_parallel(plain, heads, mesh, sequence_parallel=False):
    """The plain gpt2.GPT made tensor-parallel in place over the 1-D
    DeviceMesh `mesh` by torch's parallelize_module (module doc): c_attn's
    rows reordered so that each rank's slice holds its heads' q, k and v
    (qkv_rows), each block's attention on its rank's heads; the embeddings
    and the head whole on every rank. Returns the model."""
    from torch.distributed.tensor.parallel import parallelize_module
    P = mesh.size()
    width = plain.ln_f.weight.shape[0]
    if heads % P:
        raise ValueError("gpt_tp: %d heads over %d ranks" % (heads, P))
    rows = qkv_rows(width, P).to(plain.ln_f.weight.device)
    for b in plain.h:
        with torch.no_grad():
            b.c_attn.weight.copy_(b.c_attn.weight[rows])
            b.c_attn.bias.copy_(b.c_attn.bias[rows])
        b.heads = heads // P
        b.attention = types.MethodType(_local_attention, b)
    return parallelize_module(plain, mesh, _torch_plan(len(plain.h), sequence_parallel))
