"""coconet.torch.tp_ops: coconet.torch.tp's layer passes as torch.library
custom ops, so that torch.compile (fullgraph=True), torch.export and fake
or meta tensors see each pass as one operator, with no graph break:

  coconet::tp_pass(key, direction, names, tensors, p_drop) -> Tensor[]
      a forward or backward pass of the layer registered under key
      (coconet.torch.ops.register, held weakly): tensors are its inputs,
      named by names (comma-separated); the results are new tensors, in the
      order of OUTPUTS for the layer's kind and direction (those the layer
      has: g with sequence parallelism, db with a bias, dbeta with
      LayerNorm). The forward has its autograd registered: its backward is
      the backward pass, through the same op.
  coconet::tp_seed() -> Tensor
      a RowParallelLinearNorm call's Dropout seed (a CPU int64 tensor [1]),
      given to its forward and backward passes as the input named seed;
  coconet::tp_gather_last(key, y) -> Tensor
      every rank's y joined along the last dimension (its gradient: this
      rank's slice);
  coconet::tp_scatter_last(key, x) -> Tensor
      this rank's slice of x's last dimension (its gradient: every rank's,
      joined through tp_gather_last).

The real implementations run tp's eager passes (its autograd.Functions'
forward and backward, given a stand-in for autograd's ctx), so a compiled
model launches the same programs on the same values as an eager one. The
fake implementations give the results' shapes from the layer's kind,
options and the inputs' shapes, and run nothing.

Dropout's seed: tp_seed's real implementation draws it from torch's
default generator as the eager call does (tp._draw_seed), so a compiled
model draws the same seeds as an eager one at the same points of the
generator's sequence, on any backend (the graph holds no random op of
torch's that a backend could replace with its own). It is registered as an
ordered effect: kept in its place, run once, and never recomputed, so a
checkpointed region's recomputation in the backward reuses the forward's
seed (tp_pass itself is a pure function of its inputs and may be
recomputed)."""
from typing import List

import torch

from . import ops as _ops
from .. import CocoError
from .. import tp_layout as L

# each (kind, direction)'s results, in order (a name absent where the layer lacks it)
OUTPUTS = {("column", "forward"): ("y", "g"), ("row", "forward"): ("y",),
           ("norm", "forward"): ("out", "z"),
           ("column", "backward"): ("dx", "dw", "db"), ("row", "backward"): ("dx", "dw", "db"),
           ("norm", "backward"): ("dx", "dw", "db", "dr", "dgamma", "dbeta")}


def _tp():
    from . import tp  # tp imports this module: resolved at the first call
    return tp


class _Ctx:
    """Stands for autograd's ctx when an op's real implementation calls an
    autograd.Function's forward or backward directly."""

    def __init__(self, layer, saved=()):
        self.layer, self.saved_tensors = layer, tuple(saved)

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _has(layer, name):
    """Does the layer's pass give result `name`?"""
    if name == "g":
        return layer.sequence_parallel
    if name == "db":
        return layer.kind == "norm" or layer.bias is not None
    if name == "dbeta":
        return layer.norm_bias is not None
    return True


def _names(layer, direction):
    """The names of the layer's results for a pass, in order"""
    return [n for n in OUTPUTS[(layer.kind, direction)] if _has(layer, n)]


def _results(layer, direction, got):
    return [got[n] for n in _names(layer, direction)]


# ---- the real passes ----

def _seed_of(a):
    """The Dropout seed among a pass's inputs (a CPU int64 tensor [1]), or None."""
    return int(a["seed"].item()) if "seed" in a else None


def _forward(layer, a, p_drop):
    tp, ctx = _tp(), _Ctx(layer)
    if layer.kind == "norm":
        out, z = tp._Norm.forward(ctx, a["x"], a["w"], a["b"], a["r"], a["gamma"], a.get("beta"),
                                  layer, p_drop, _seed_of(a))
        return {"out": out, "z": z}
    fn = tp._Column if layer.kind == "column" else tp._Row
    y = fn.forward(ctx, a["x"], a["w"], a.get("b"), layer)
    return {"y": y, "g": ctx.saved_tensors[0]}  # g: the gathered input (sequence parallelism)


def _backward(layer, a, p_drop):
    tp = _tp()
    if layer.kind == "norm":
        ctx = _Ctx(layer, (a["x"], a["w"], a["z"], a["gamma"]))
        ctx.p_drop, ctx.seed, ctx.has_beta = p_drop, _seed_of(a), layer.norm_bias is not None
        got = tp._Norm.backward(ctx, a["dout"], a["dz"])
        return dict(zip(OUTPUTS[("norm", "backward")], got))
    column = layer.kind == "column"
    kept = "g" if column else "x"
    ctx = _Ctx(layer, (a[kept], a["w"]))
    ctx.write = layer._write
    ctx.has_bias = layer.bias is not None
    fn = tp._Column if column else tp._Row
    return dict(zip(("dx", "dw", "db"), fn.backward(ctx, a["dy"])))


@torch.library.custom_op("coconet::tp_pass", mutates_args=())
def _tp_pass(key: int, direction: str, names: str, tensors: List[torch.Tensor],
             p_drop: float) -> List[torch.Tensor]:
    layer = _ops._target(key)
    a = dict(zip(names.split(","), tensors))
    got = (_forward if direction == "forward" else _backward)(layer, a, p_drop)
    return _results(layer, direction, got)


# ---- the fake passes: shapes only ----

def _forward_shapes(layer, a):
    x, w = a["x"], a["w"]
    tokens, P, sp = x.shape[0], layer.ranks, layer.sequence_parallel
    if layer.kind == "column":
        whole = tokens * P if sp else tokens
        return {"y": x.new_empty(whole, w.shape[0]), "g": x.new_empty(whole, x.shape[1])}
    if layer.kind == "row":
        return {"y": x.new_empty(tokens // P if sp else tokens, w.shape[0])}
    return {"out": x.new_empty(tokens, w.shape[0]), "z": x.new_empty(tokens, w.shape[0])}


def _backward_shapes(layer, a):
    w = a["w"]
    got = {"dw": w.new_empty(w.shape), "db": w.new_empty(w.shape[0])}
    if layer.kind == "column":
        g = a["g"]
        got["dx"] = w.new_empty(g.shape[0] // layer.ranks if layer.sequence_parallel
                                else g.shape[0], g.shape[1])
        return got
    got["dx"] = w.new_empty(a["x"].shape)
    if layer.kind == "norm":
        got["dr"] = w.new_empty(a["z"].shape)
        got["dgamma"] = w.new_empty(a["gamma"].shape)
        got["dbeta"] = w.new_empty(a["gamma"].shape)
    return got


@_tp_pass.register_fake
def _tp_pass_fake(key, direction, names, tensors, p_drop):
    layer = _ops._target(key)
    a = dict(zip(names.split(","), tensors))
    got = (_forward_shapes if direction == "forward" else _backward_shapes)(layer, a)
    return _results(layer, direction, got)


# ---- the forward's autograd: the backward pass ----

def _tp_pass_setup(ctx, inputs, output):
    key, direction, names, tensors, p_drop = inputs
    layer = _ops._target(key)
    a, got = dict(zip(names.split(","), tensors)), dict(zip(_names(layer, direction), output))
    ctx.key, ctx.direction, ctx.names, ctx.p_drop = key, direction, names, p_drop
    if direction != "forward":
        return
    if layer.kind == "norm":
        ctx.save_for_backward(a["x"], a["w"], got["z"], a["gamma"], *([a["seed"]] if "seed" in a else []))
    else:
        ctx.save_for_backward(got["g"] if "g" in got else a["x"], a["w"])


def _tp_pass_backward(ctx, grads):
    if ctx.direction != "forward":
        raise CocoError("coconet.torch.tp: a layer's backward pass has no gradient of its own "
                        "(double backward is not supported)")
    layer = _ops._target(ctx.key)
    saved = ctx.saved_tensors
    # grads: one a result, zeros where a result has none (autograd materializes them)
    if layer.kind == "norm":
        names = "dout,dz,z,gamma,x,w" + (",seed" if len(saved) > 4 else "")
        x, w, z, gamma = saved[:4]
        got = torch.ops.coconet.tp_pass(ctx.key, "backward", names,
                                        [grads[0], grads[1], z, gamma, x, w, *saved[4:]],
                                        ctx.p_drop)
    else:
        kept = "g" if layer.kind == "column" else "x"
        got = torch.ops.coconet.tp_pass(ctx.key, "backward", "dy,%s,w" % kept,
                                        [grads[0], saved[0], saved[1]], ctx.p_drop)
    named = dict(zip(_names(layer, "backward"), got))
    wanted = {"x": "dx", "w": "dw", "b": "db", "r": "dr", "gamma": "dgamma", "beta": "dbeta"}
    return None, None, None, [named.get(wanted.get(n)) for n in ctx.names.split(",")], None


_tp_pass.register_autograd(_tp_pass_backward, setup_context=_tp_pass_setup)


def forward(layer, names, tensors, p_drop=0.0):
    """The layer's forward through coconet::tp_pass: its results (OUTPUTS)."""
    return torch.ops.coconet.tp_pass(layer._key, "forward", names, tensors, float(p_drop))


# ---- Dropout's seed ----

@torch.library.custom_op("coconet::tp_seed", mutates_args=())
def _tp_seed() -> torch.Tensor:
    return torch.tensor([_tp()._draw_seed()], dtype=torch.int64)


@_tp_seed.register_fake
def _tp_seed_fake():
    return torch.empty(1, dtype=torch.int64, device="cpu")


def _keep_in_order():
    """tp_seed draws from torch's generator: kept in order, run once, never
    recomputed. torch's registration of effects is private (this form takes
    an OpOverload): True where this PyTorch has it."""
    try:
        from torch._higher_order_ops.effects import _EffectType, _register_effectful_op
        _register_effectful_op(torch.ops.coconet.tp_seed.default, _EffectType.ORDERED)
        return True
    except (ImportError, AttributeError, TypeError):
        return False


_ORDERED = _keep_in_order()


def seed():
    """A layer call's Dropout seed, drawn as the eager call draws it."""
    if not _ORDERED:
        from .._log import warn_once
        warn_once("tp_seed", "coconet.torch.tp: this PyTorch cannot keep a compiled layer's "
                  "Dropout seed in order (torch._higher_order_ops.effects): a checkpointed "
                  "region recomputed in the backward may draw other masks than its forward")
    return torch.ops.coconet.tp_seed()


# ---- joining and slicing the last dimension ----

@torch.library.custom_op("coconet::tp_gather_last", mutates_args=())
def _gather_last(key: int, y: torch.Tensor) -> torch.Tensor:
    return torch.cat(_ops._target(key)._gather_parts(y), dim=-1)


@_gather_last.register_fake
def _gather_last_fake(key, y):
    return y.new_empty(tuple(y.shape[:-1]) + (y.shape[-1] * _ops._target(key).ranks,))


def _keep_key(ctx, inputs, output):
    ctx.key = inputs[0]


def _gather_last_backward(ctx, g):
    layer = _ops._target(ctx.key)
    return None, L.cut(g, g.dim() - 1, layer.rank, layer.ranks).contiguous()


_gather_last.register_autograd(_gather_last_backward, setup_context=_keep_key)


@torch.library.custom_op("coconet::tp_scatter_last", mutates_args=())
def _scatter_last(key: int, x: torch.Tensor) -> torch.Tensor:
    layer = _ops._target(key)
    return L.cut(x, x.dim() - 1, layer.rank, layer.ranks).clone(
        memory_format=torch.contiguous_format)


@_scatter_last.register_fake
def _scatter_last_fake(key, x):
    layer = _ops._target(key)
    return x.new_empty(tuple(x.shape[:-1]) + (x.shape[-1] // layer.ranks,))


def _scatter_last_backward(ctx, g):
    return None, torch.ops.coconet.tp_gather_last(ctx.key, g.contiguous())


_scatter_last.register_autograd(_scatter_last_backward, setup_context=_keep_key)


def gather_last(layer, y):
    return torch.ops.coconet.tp_gather_last(layer._key, y)


def scatter_last(layer, x):
    return torch.ops.coconet.tp_scatter_last(layer._key, x)
