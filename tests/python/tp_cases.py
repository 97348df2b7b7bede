"""tp_cases.py: coconet.torch.tp's layers against torch on whole tensors, at
this rank of P: each layer built from whole weights, given this rank's part
of the input and of the output's gradient; its output and every gradient
compared with torch's (FP64, on the CPU) on the whole tensors, cut as this
rank holds them. Run on the CPU stand-ins (test_tp_torch.py, tp_ranks.py)
and on GPUs (tests/gpu/torch_check.py): a Setup says where, in which type,
at which sizes and within which relative error."""
import torch

from coconet import tp_layout as L
from coconet.torch import tp


class Setup:
    """device, dtype, tolerance (the largest error relative to the
    reference's largest magnitude), sizes: sequence S, batch B, widths
    IN and OUT (S, IN and OUT multiples of P)."""

    def __init__(self, device="cpu", dtype=torch.float32, tol=1e-5, dims=(4, 3, 8, 16)):
        self.device, self.dtype, self.tol = torch.device(device), dtype, tol
        self.S, self.B, self.IN, self.OUT = dims

    def randn(self, g, *shape):
        """Random values in this setup's type (the reference reads them as
        given), on the CPU."""
        return torch.randn(*shape, generator=g).to(self.dtype)

    def to(self, t):
        return t.to(self.device)


CPU = Setup()


def _g(seed):
    return torch.Generator().manual_seed(seed)


def close(name, got, want, tol):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    err = float((got - want).abs().max() / (want.abs().max() + 1e-30))
    if got.shape != want.shape or not err <= tol:
        raise AssertionError("%s: relative error %.2e (shapes %s, %s)"
                             % (name, err, list(got.shape), list(want.shape)))
    return err


def _ref(*ts):
    return [t.double().requires_grad_() for t in ts]


def column(rank, P, sp, bias=True, gather=False, c=CPU):
    g = _g(1)
    W, b = c.randn(g, c.OUT, c.IN), c.randn(g, c.OUT)
    x, gy = c.randn(g, c.S, c.B, c.IN), c.randn(g, c.S, c.B, c.OUT)
    layer = tp.ColumnParallelLinear.from_full(W, b if bias else None, gather_output=gather,
                                              sequence_parallel=sp)
    xl = c.to(L.cut(x, 0, rank, P) if sp else x).clone().requires_grad_()
    y = layer(xl)
    y.backward(c.to(gy if gather else L.cut(gy, 2, rank, P)))
    Wr, br, xr = _ref(W, b, x)
    yr = xr @ Wr.T + (br if bias else 0)
    yr.backward(gy.double())
    errs = [close("y", y, yr if gather else L.cut(yr, 2, rank, P), c.tol),
            close("dx", xl.grad, L.cut(xr.grad, 0, rank, P) if sp else xr.grad, c.tol),
            close("dw", layer.weight.grad, L.cut(Wr.grad, 0, rank, P), c.tol)]
    if bias:
        errs.append(close("db", layer.bias.grad, L.cut(br.grad, 0, rank, P), c.tol))
    return max(errs)


def row(rank, P, sp, bias=True, parallel_input=True, c=CPU):
    g = _g(2)
    W, b = c.randn(g, c.IN, c.OUT), c.randn(g, c.IN)  # [out, in]: OUT -> IN
    x, gy = c.randn(g, c.S, c.B, c.OUT), c.randn(g, c.S, c.B, c.IN)
    layer = tp.RowParallelLinear.from_full(W, b if bias else None, sequence_parallel=sp,
                                           input_is_parallel=parallel_input)
    xl = c.to(L.cut(x, 2, rank, P) if parallel_input else x).clone().requires_grad_()
    y = layer(xl)
    y.backward(c.to(L.cut(gy, 0, rank, P) if sp else gy))
    Wr, br, xr = _ref(W, b, x)
    yr = xr @ Wr.T + (br if bias else 0)
    yr.backward(gy.double())
    errs = [close("y", y, L.cut(yr, 0, rank, P) if sp else yr, c.tol),
            close("dx", xl.grad, L.cut(xr.grad, 2, rank, P) if parallel_input else xr.grad,
                  c.tol),
            close("dw", layer.weight.grad, L.cut(Wr.grad, 1, rank, P), c.tol)]
    if bias:
        errs.append(close("db", layer.bias.grad, br.grad, c.tol))
    return max(errs)


def norm_reference(x, W, b, r, gamma, beta, norm, mask, p):
    z = x @ W.T + b
    if mask is not None:
        z = z * mask / (1 - p)
    z = z + r
    if norm == "layernorm":
        return torch.nn.functional.layer_norm(z, z.shape[-1:], gamma, beta, 1e-5), z
    return z * torch.rsqrt((z * z).mean(-1, keepdim=True) + 1e-5) * gamma, z


def norm(rank, P, sp, kind="layernorm", p=0.0, c=CPU):
    g = _g(3)
    W, b = c.randn(g, c.IN, c.OUT), c.randn(g, c.IN)
    gamma, beta = c.randn(g, c.IN), c.randn(g, c.IN)
    x, r = c.randn(g, c.S, c.B, c.OUT), c.randn(g, c.S, c.B, c.IN)
    gout, gz = c.randn(g, c.S, c.B, c.IN), c.randn(g, c.S, c.B, c.IN)
    layer = tp.RowParallelLinearNorm.from_full(W, b, gamma, beta, norm=kind, p_drop=p,
                                               sequence_parallel=sp)
    xl = c.to(L.cut(x, 2, rank, P)).clone().requires_grad_()
    rl = c.to(r).clone().requires_grad_()
    torch.manual_seed(11)
    seed = tp._draw_seed()
    torch.manual_seed(11)
    out, z = layer(xl, rl)
    torch.autograd.backward([out, z], [c.to(gout), c.to(gz)])
    mask = None
    if p > 0:
        n = c.S * c.B * c.IN
        mask = torch.tensor(L.keep_mask(seed, 0, n, p), dtype=torch.float64)
        mask = mask.view(c.S, c.B, c.IN)
    ref = _ref(x, W, b, r, gamma, beta)
    oref, zref = norm_reference(*ref, kind, mask, p)
    torch.autograd.backward([oref, zref], [gout.double(), gz.double()])
    xr, Wr, br, rr, gr, betar = ref
    errs = [close("out", out, oref, c.tol), close("z", z, zref, c.tol),
            close("dx", xl.grad, L.cut(xr.grad, 2, rank, P), c.tol),
            close("dw", layer.weight.grad, L.cut(Wr.grad, 1, rank, P), c.tol),
            close("db", layer.bias.grad, br.grad, c.tol), close("dr", rl.grad, rr.grad, c.tol),
            close("dgamma", layer.norm_weight.grad, gr.grad, c.tol)]
    if kind == "layernorm":
        errs.append(close("dbeta", layer.norm_bias.grad, betar.grad, c.tol))
    return max(errs)


def configs(full=True):
    """The checks: (name, kind, options). full: every option; else one of
    each kind and mode (the GPU's FP16 and BF16 runs, fewer builds)."""
    out = []
    for sp in (False, True):
        for bias in ((True, False) if full else (True,)):
            out.append(("column sp=%d bias=%d" % (sp, bias), "column", dict(sp=sp, bias=bias)))
            out.append(("row sp=%d bias=%d" % (sp, bias), "row", dict(sp=sp, bias=bias)))
        for kind in tp.tp_programs.NORMS:
            for p in ((0.0, 0.3) if full else (0.3 if sp else 0.0,)):
                out.append(("%s sp=%d p=%g" % (kind, sp, p), "norm", dict(sp=sp, kind=kind, p=p)))
    out.append(("column gather_output", "column", dict(sp=False, gather=True)))
    out.append(("row input_is_parallel=0", "row", dict(sp=False, parallel_input=False)))
    return out


def texts(dtype, full=True, ranks=None):
    """(file name, schedule, program text) of every program the checks run
    at `ranks` ranks (dtype: "FP16", "BF16" or "FP32"), to build them ahead."""
    P = tp.tp_programs
    out = set()
    for _, kind, o in configs(full):
        for d in P.DIRECTIONS:
            if kind == "column":
                text = P.column_parallel(d, dtype, o["sp"], o.get("bias", True))
            elif kind == "row":
                text = P.row_parallel(d, dtype, o["sp"], o.get("bias", True))
            else:
                text = P.norm_after_row_parallel(d, dtype, o["kind"], o["p"], 1e-5)
            out.add(L.program_choice(kind, d, o["sp"], text, ranks=ranks) + (text,))
    return sorted(out)


def every_layer(rank, P, c=CPU, full=True):
    """Each layer's forward and backward against torch on whole tensors:
    [(the check, its largest relative error)]."""
    run = {"column": column, "row": row, "norm": norm}
    return [(name, run[kind](rank, P, c=c, **o)) for name, kind, o in configs(full)]


def _examples():
    """examples/torch on the path (gpt2.py, gpt_tp.py, train_tp.py)."""
    import os
    import sys
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "torch")
    if here not in sys.path:
        sys.path.insert(0, here)


def _small_gpt(c):
    _examples()
    import gpt2
    torch.manual_seed(0)
    return gpt2.GPT(vocab=64, ctx=16, width=32, layers=2, heads=4).to(c.device)


def gpt(rank, P, impl, sp, c=CPU, fused_norm=False):
    """examples/torch/gpt_tp.py's model (a small one) against the plain
    gpt2.GPT it is made from: logits, and the gradients of the embedding,
    a LayerNorm and each rank's part of every projection."""
    import copy
    plain = _small_gpt(c)
    import gpt_tp
    model = gpt_tp.TPGPT(copy.deepcopy(plain), 4, impl=impl, sequence_parallel=sp,
                         fused_norm=fused_norm)
    idx = torch.randint(0, 64, (2, 8), generator=_g(5)).to(c.device)
    errs = []
    for m in (plain, model):
        logits = m(idx)
        torch.nn.functional.cross_entropy(logits.reshape(-1, 64), idx.reshape(-1)).backward()
        errs.append(logits)
    gpt_tp.sync_sequence_parallel_grads(model)
    out = [close("logits", errs[1], errs[0], c.tol)]
    a, b = plain.h[1], model.h[1]
    rows = gpt_tp.qkv_rows(32, P)
    c_proj, mlp_proj = (b.proj_norm, b.mlp_norm) if fused_norm else (b.c_proj, b.mlp_proj)
    ln_1 = model.h[0].mlp_norm.norm_weight if fused_norm else b.ln_1.weight
    pairs = [("wte", model.wte.weight.grad, plain.wte.weight.grad),
             ("ln_1", ln_1.grad, a.ln_1.weight.grad),
             ("c_attn", b.c_attn.weight.grad, L.cut(a.c_attn.weight.grad[rows], 0, rank, P)),
             ("c_proj", c_proj.weight.grad, L.cut(a.c_proj.weight.grad, 1, rank, P)),
             ("c_fc", b.c_fc.weight.grad, L.cut(a.c_fc.weight.grad, 0, rank, P)),
             ("mlp_proj", mlp_proj.weight.grad, L.cut(a.mlp_proj.weight.grad, 1, rank, P)),
             ("mlp_proj bias", mlp_proj.bias.grad, a.mlp_proj.bias.grad)]
    return max(out + [close(n, x, y, c.tol * 10) for n, x, y in pairs])


def train(rank, P, sp, fused_norm=False, steps=4, impl="coconet", c=CPU):
    """examples/torch/train_tp.py's model, optimizer and step: the small
    model of gpt() with coconet's layers under coconet.torch.optim's AdamW
    (each rank its own group: its shards stepped alone), or (impl
    "torch-dtensor") made tensor-parallel by torch's parallelize_module
    under torch.optim.AdamW, against the plain model under torch's AdamW,
    from the same weights on the same batches; the largest relative
    difference of their losses over the steps."""
    import argparse
    import copy
    plain = _small_gpt(c)
    import train_tp
    args = argparse.Namespace(lr=1e-2, beta2=0.95, wd=0.01, impl=impl, sp=sp,
                              fused_norm=fused_norm)
    twin = copy.deepcopy(plain)
    model = train_tp.parallel(plain, 4, args)
    opt = train_tp.optimizer(model, args, "torch" if impl in train_tp.DTENSOR else "coconet")
    ref = train_tp.optimizer(twin, args, "torch")
    worst = 0.0
    for s in range(1, steps + 1):
        w = c.to(torch.randint(0, 64, (2, 9), generator=_g(s)))
        a = train_tp.step(model, opt, w[:, :-1], w[:, 1:], args, False, args.lr)
        b = train_tp.step(twin, ref, w[:, :-1], w[:, 1:], args, False, args.lr)
        worst = max(worst, abs(a - b) / abs(b))
    if not worst <= c.tol:
        raise AssertionError("train_tp %s: losses %.2e apart (relative)" % (impl, worst))
    return worst
