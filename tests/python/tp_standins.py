"""tp_standins.py: stand-ins for coconet.torch's session, arena and
compiler, so that coconet.torch.tp's layers run on the CPU at one rank or
at several (processes joined by torch.distributed's gloo backend): a
"compiled" program is the real program (or schedule) run by the CPU
reference executor (run_cpu) on every rank's tensors, gathered; each rank
takes its part of the outputs. A Replicated input must be the same on every
rank (the stand-in checks it). Also the layers' checks against torch on
whole tensors (test_tp_torch.py, tp_ranks.py)."""
import numpy as np
import torch
import torch.distributed as dist

import coconet
from coconet import _session as S
from coconet import tp_layout as L
from coconet.torch import tp

TORCH = {"FP16": torch.float16, "BF16": torch.bfloat16, "FP32": torch.float32}


class Sess:
    device = torch.device("cpu")

    def __init__(self):
        on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if on else 0
        self.nranks = dist.get_world_size() if on else 1


def _all(a, nranks):
    if nranks == 1:
        return [a]
    out = [None] * nranks
    dist.all_gather_object(out, a)
    return out


class Compiled:
    built = []  # (path, schedule) of every program "built" (not those bound by at())
    calls = 0

    def __init__(self, path, schedule="program", sizes=None, group=None, seed=0,
                 nccl_path=False, _base=None):
        sess = Sess()
        self.rank, self.nranks = sess.rank, sess.nranks
        self.path, self.schedule, self.sizes = path, schedule, dict(sizes or {})
        self.program = coconet.load(path, sizes=self.sizes, ranks=self.nranks)
        self.run = self.program if schedule == "program" else self.program.schedule(schedule)
        self.spec = S.VariantSpec(self.program, schedule, self.rank)
        self._window, self._nccl_path = (set(), set()), False
        self._shapes = _base._shapes if _base else {}
        if _base is None:
            Compiled.built.append((path, schedule))

    def at(self, sizes):
        key = tuple(sorted(dict(self.sizes, **sizes).items()))
        if key not in self._shapes:
            self._shapes[key] = Compiled(self.path, self.schedule, dict(key), _base=self)
        return self._shapes[key]

    def _input(self, name, value):
        if not isinstance(value, torch.Tensor):
            return float(value)
        info = self.program.tensor_info(name)
        a = value.detach().double().numpy()
        parts = _all(a, self.nranks)
        if info.layout.startswith("Sliced") or info.layout == "Local":
            return parts
        if not all(np.array_equal(p, a) for p in parts):
            raise AssertionError("Replicated input '%s' differs between the ranks" % name)
        return a

    def __call__(self, inputs=None, seed=None, out=None, **named):
        given = dict(inputs or {}, **named)
        run_in = {name: self._input(name, given[name]) for name in self.program.inputs}
        got = self.run.run_cpu(run_in, seed=seed or 1)
        Compiled.calls += 1
        res = {}
        for o in self.spec.outputs:
            v = got[o.name]
            v = v[self.rank] if isinstance(v, list) else v
            res[o.name] = torch.from_numpy(np.asarray(v, np.float64)).to(TORCH[o.type])
        return res if len(res) > 1 else next(iter(res.values()))


def install(setattr_):
    """The stand-ins in place of the session, arena and compiler
    (setattr_: pytest's monkeypatch.setattr, or setattr)."""
    sess = Sess()
    setattr_(tp, "session", lambda group=None, arena_bytes=None: sess)
    setattr_(tp, "_compile", Compiled)
    setattr_(tp, "in_arena", lambda t, group=None: True)
    setattr_(tp, "empty", lambda shape, dtype, group=None: torch.empty(shape, dtype=dtype))
    tp._compiled.clear()
    Compiled.built = []
    return sess


# ---- the layers against torch on whole tensors ----

S_, B_, IN, OUT = 4, 3, 8, 16  # sequence, batch, features: S_ and the widths divide by 4


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _close(name, got, want, tol):
    got, want = got.detach().double(), want.detach().double()
    err = float((got - want).abs().max() / (want.abs().max() + 1e-30))
    if got.shape != want.shape or not err <= tol:
        raise AssertionError("%s: relative error %.2e (shapes %s, %s)"
                             % (name, err, list(got.shape), list(want.shape)))


def column(rank, P, sp, bias=True, gather=False, tol=1e-5):
    g = _g(1)
    W, b = torch.randn(OUT, IN, generator=g), torch.randn(OUT, generator=g)
    x, gy = torch.randn(S_, B_, IN, generator=g), torch.randn(S_, B_, OUT, generator=g)
    layer = tp.ColumnParallelLinear.from_full(W, b if bias else None, gather_output=gather,
                                              sequence_parallel=sp)
    xl = (L.cut(x, 0, rank, P) if sp else x).clone().requires_grad_()
    y = layer(xl)
    y.backward(gy if gather else L.cut(gy, 2, rank, P))
    Wr, br, xr = (t.double().requires_grad_() for t in (W, b, x))
    yr = xr @ Wr.T + (br if bias else 0)
    yr.backward(gy.double())
    _close("y", y, yr if gather else L.cut(yr, 2, rank, P), tol)
    _close("dx", xl.grad, L.cut(xr.grad, 0, rank, P) if sp else xr.grad, tol)
    _close("dw", layer.weight.grad, L.cut(Wr.grad, 0, rank, P), tol)
    if bias:
        _close("db", layer.bias.grad, L.cut(br.grad, 0, rank, P), tol)
    return layer


def row(rank, P, sp, bias=True, parallel_input=True, tol=1e-5):
    g = _g(2)
    W, b = torch.randn(IN, OUT, generator=g), torch.randn(IN, generator=g)  # [out, in]
    x, gy = torch.randn(S_, B_, OUT, generator=g), torch.randn(S_, B_, IN, generator=g)
    layer = tp.RowParallelLinear.from_full(W, b if bias else None, sequence_parallel=sp,
                                           input_is_parallel=parallel_input)
    xl = (L.cut(x, 2, rank, P) if parallel_input else x).clone().requires_grad_()
    y = layer(xl)
    y.backward(L.cut(gy, 0, rank, P) if sp else gy)
    Wr, br, xr = (t.double().requires_grad_() for t in (W, b, x))
    yr = xr @ Wr.T + (br if bias else 0)
    yr.backward(gy.double())
    _close("y", y, L.cut(yr, 0, rank, P) if sp else yr, tol)
    _close("dx", xl.grad, L.cut(xr.grad, 2, rank, P) if parallel_input else xr.grad, tol)
    _close("dw", layer.weight.grad, L.cut(Wr.grad, 1, rank, P), tol)
    if bias:
        _close("db", layer.bias.grad, br.grad, tol)
    return layer


def norm_reference(x, W, b, r, gamma, beta, norm, mask, p):
    z = x @ W.T + b
    if mask is not None:
        z = z * mask / (1 - p)
    z = z + r
    if norm == "layernorm":
        return torch.nn.functional.layer_norm(z, z.shape[-1:], gamma, beta, 1e-5), z
    return z * torch.rsqrt((z * z).mean(-1, keepdim=True) + 1e-5) * gamma, z


def norm(rank, P, sp, kind="layernorm", p=0.0, tol=1e-5):
    g = _g(3)
    W, b = torch.randn(IN, OUT, generator=g), torch.randn(IN, generator=g)
    gamma, beta = torch.randn(IN, generator=g), torch.randn(IN, generator=g)
    x, r = torch.randn(S_, B_, OUT, generator=g), torch.randn(S_, B_, IN, generator=g)
    gout, gz = torch.randn(S_, B_, IN, generator=g), torch.randn(S_, B_, IN, generator=g)
    layer = tp.RowParallelLinearNorm.from_full(W, b, gamma, beta, norm=kind, p_drop=p,
                                               sequence_parallel=sp)
    xl = L.cut(x, 2, rank, P).clone().requires_grad_()
    rl = r.clone().requires_grad_()
    torch.manual_seed(11)
    seed = tp._draw_seed()
    torch.manual_seed(11)
    out, z = layer(xl, rl)
    torch.autograd.backward([out, z], [gout, gz])
    mask = None
    if p > 0:
        mask = torch.tensor(L.keep_mask(seed, 0, S_ * B_ * IN, p), dtype=torch.float64)
        mask = mask.view(S_, B_, IN)
    ref = [t.double().requires_grad_() for t in (x, W, b, r, gamma, beta)]
    oref, zref = norm_reference(*ref, kind, mask, p)
    torch.autograd.backward([oref, zref], [gout.double(), gz.double()])
    xr, Wr, br, rr, gr, betar = ref
    _close("out", out, oref, tol)
    _close("z", z, zref, tol)
    _close("dx", xl.grad, L.cut(xr.grad, 2, rank, P), tol)
    _close("dw", layer.weight.grad, L.cut(Wr.grad, 1, rank, P), tol)
    _close("db", layer.bias.grad, br.grad, tol)
    _close("dr", rl.grad, rr.grad, tol)
    _close("dgamma", layer.norm_weight.grad, gr.grad, tol)
    if kind == "layernorm":
        _close("dbeta", layer.norm_bias.grad, betar.grad, tol)
    return layer


def every_layer(rank, P):
    """Each layer's forward and backward against torch on whole tensors;
    the checks' names."""
    done = []
    for sp in (False, True):
        for bias in (True, False):
            column(rank, P, sp, bias)
            row(rank, P, sp, bias)
            done += ["column sp=%s bias=%s" % (sp, bias), "row sp=%s bias=%s" % (sp, bias)]
        for kind in tp.tp_programs.NORMS:
            norm(rank, P, sp, kind, p=0.0)
            norm(rank, P, sp, kind, p=0.3)
            done.append("%s sp=%s p=0, 0.3" % (kind, sp))
    column(rank, P, False, gather=True)
    row(rank, P, False, parallel_input=False)
    done += ["column gather_output", "row input_is_parallel=False"]
    return done
