"""coconet.torch.tp: Megatron-LM's tensor- and sequence-parallel layers for
training, each an autograd.Function whose forward and backward are coconet
programs (coconet.tp_programs), compiled through coconet.torch.compile and
its cache at the first call and bound to each call's token count with no
new build (Compiled.at).

    ColumnParallelLinear(in, out, bias=True, gather_output=False,
                         sequence_parallel=False)        weight [out/P, in]
    RowParallelLinear(in, out, bias=True, input_is_parallel=True,
                      sequence_parallel=False)           weight [out, in/P]
    RowParallelLinearNorm(in, out, norm="layernorm", p_drop=0.1, eps=1e-5,
                          sequence_parallel=False)

Activations are [..., features], tokens in the leading dimensions; with
sequence parallelism each rank holds its part of the first dimension
(Megatron's [s/P, b, h]): ColumnParallelLinear gathers it (AllGather
overlapped with the MatMul) and keeps the gathered input for dW (no second
AllGather); its backward reduce-scatters dX overlapped with dX's MatMul.
RowParallelLinear ends with a ReduceScatter (sequence parallelism) or an
AllReduce (the bias inside the fused collective), its backward gathers the
output gradient overlapped with dX's MatMul. RowParallelLinearNorm is a
row-parallel projection followed by bias + dropout + residual and LayerNorm
or RMSNorm: forward(x, residual) -> (norm output, residual stream z), both
whole on every rank; with sequence_parallel the norm runs on each rank's
tokens inside one fused ReduceScatter-norm-AllGather collective, overlapped
with the projection. Its backward has no collective: it takes the
gradients of both outputs whole on every rank (as the next
ColumnParallelLinear gives them, reduced) and runs the norm's backward on
every token.

prebuild(model, tokens, dtype=None, optimizer=None) builds the programs a
step of the model's layers calls (and the optimizer's step, given a
coconet.torch.optim one), several nvcc at once, so that the first step
finds them in the cache rather than building them one after another.

Types: the parameters' dtype, or autocast's (FP16 or BF16) when autocast is
on for the device: inputs and parameters are cast to it, gradients flow
back to the parameters' own dtype. Dropout follows Megatron's RNG tracker
rules (coconet.tp_layout's documentation): one seed per call, drawn from
torch's default generator and kept for the backward; the same mask on every
rank where the activation is whole, a different one where it is sliced; a
recomputation under torch.utils.checkpoint (reentrant or not) restores the
generator and so draws the same mask.

Parameters carry Megatron's attributes (tensor_model_parallel,
partition_dim, partition_stride, sequence_parallel). A whole parameter's
gradient is whole on every rank, with sequence parallelism too (the
programs reduce over every token), so sequence_parallel is False on each:
unlike Megatron's biases and norms applied on each rank's tokens, they need
no all-reduce of their gradients. from_megatron / to_megatron move weights in and out
of Megatron checkpoints saved at any tensor-parallel size. At P > 1 the
tensors a fused collective reads in the peers' memory are copied into this
layer's buffers in the arena when they lie outside it.

torch.compile and export: a traced call (under torch.compile or
torch.export, or on fake tensors) goes through custom ops
(coconet.torch.tp_ops): each pass one coconet::tp_pass running the
program an eager call runs, with its backward registered; gather_output
and input_is_parallel=False one op each; Dropout's seed drawn by
coconet::tp_seed as an eager call draws it, and never recomputed. So
torch.compile(model, fullgraph=True) of a model built from these layers
has no graph break, forward and backward, and gives the eager model's
outputs and gradients bit for bit (inductor: except where its own code
between the layers, a GELU say, differs from eager's); under activation
checkpointing the recomputation reuses the forward's seed; torch.export
holds the ops. Keep the layers alive while a graph calling them runs.
Checked on the CPU reference (backends eager, aot_eager and inductor;
autocast; P = 1 and 2)."""
import copy
import functools
import math
import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, \
    TypeVar

import torch
import torch.distributed as dist

from . import CocoError, TORCH_TYPES, TYPE_NAMES, empty, in_arena, \
    session
from . import compile as _compile
from ._build import build_lock, build_parallel, cache_dir as _cache_dir
from . import ops as _ops
from . import tp_ops as _tp_ops
from .. import programs
from .. import tp_layout as L
from .. import tp_programs

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

# A layer's class, for the constructors from whole or Megatron weights.
Layer = TypeVar("Layer", bound="_LinearLayer")
# init=: (weight, bias) whole, as from_full takes them, instead of drawn.
Init = Optional[Tuple[torch.Tensor, Optional[torch.Tensor]]]

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "RowParallelLinearNorm", "prebuild"]

_compiled: Dict[tuple, Any] = {}  # (program text, schedule, group) -> the Compiled, shared by every layer
_bound: Dict[tuple, Any] = {}  # everything _Layer._fn's choice reads -> the Compiled at its sizes


def _compiled_key(text, schedule, group):
    return (text, schedule, id(group) if group is not None else None)


def _write_program(text, name):
    """The program's file in the cache (named by its text)."""
    return programs.write(text, name, os.path.join(_cache_dir(), "torch-programs"))


def _program(text, name, schedule, sizes, group):
    """The compiled program of `text` (built once, bound to sizes per call)."""
    key = _compiled_key(text, schedule, group)
    c = _compiled.get(key)
    if c is None:
        c = _compiled[key] = _compile(_write_program(text, name), schedule=schedule,
                                      sizes=sizes, group=group)
    return c.at(sizes)


def _directions(backward):
    return ("forward", "backward") if backward else ("forward",)


@functools.lru_cache(maxsize=None)
def _text(write, *args):
    """write(*args): a program's text from a tp_programs writer (a pure
    function), written once; each call of a layer asks for it again."""
    return write(*args)


def _draw_seed():
    """A call's Dropout seed from torch's default (CPU) generator."""
    return L.seed_from_draw(int(torch.randint(0, 1 << L.SEED_BITS, (1,)).item()))


def _compute_dtype(t):
    """Autocast's type for t's device when it is on, else t's own."""
    dev = t.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return t.dtype


def _type_name(dtype):
    name = TYPE_NAMES.get(dtype)
    if name not in programs.TYPES:
        raise CocoError("coconet.torch.tp: dtype %s: expected float16, bfloat16 or float32"
                        % dtype)
    return name


class _Layer(torch.nn.Module):
    """What the layers share: the group, the programs and their calls."""
    kind: Optional[str] = None

    def __init__(self, sequence_parallel, group, schedule):
        super().__init__()
        self.sess = session(group)
        self.group, self.sequence_parallel = group, bool(sequence_parallel)
        self.schedule = schedule  # None: each program's default (tp_layout)
        self._stage = {}  # input name -> an arena buffer (P > 1, tensors outside it)
        self._key = _ops.register(self)  # tp_ops' handle on it (traced calls)

    def __deepcopy__(self, memo):
        """A copy with its own parameters, buffers and key (a traced call
        of the copy finds the copy, not this layer), sharing the session and
        the group, which are handles rather than values; its arena staging
        buffers are made at its own calls."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            if name in ("sess", "group"):
                new.__dict__[name] = value
            elif name == "_stage":
                new.__dict__[name] = {}
            else:
                new.__dict__[name] = copy.deepcopy(value, memo)
        new._key = _ops.register(new)
        return new

    @property
    def rank(self):
        return self.sess.rank

    @property
    def ranks(self):
        return self.sess.nranks

    def _bound_key(self, direction, text, tokens):
        """Everything _choice reads: _bound's key"""
        return (text, direction, tokens, self.kind, self.in_features, self.out_features,
                self.sequence_parallel, self.schedule, self.ranks,
                id(self.group) if self.group is not None else None)

    def _choice(self, direction, text, tokens):
        """The program's name, schedule and sizes for a call on `tokens`
        tokens (refused, saying why, where the layer cannot take them)."""
        sizes = L.program_sizes(self.kind, tokens, self.in_features, self.out_features)
        L.check_sizes(self.kind, sizes, self.ranks, self.sequence_parallel)
        name, schedule = L.program_choice(self.kind, direction, self.sequence_parallel, text,
                                          self.schedule, self.ranks)
        return name, schedule, sizes

    def _fn(self, direction, text, tokens):
        """The program `text` bound to `tokens` tokens, under this layer's
        schedule (None: the default for its kind and direction); looked up
        once per distinct call (_bound), since every call of a layer asks."""
        key = self._bound_key(direction, text, tokens)
        fn = _bound.get(key)
        if fn is None:
            name, schedule, sizes = self._choice(direction, text, tokens)
            fn = _bound[key] = _program(text, name, schedule, sizes, self.group)
        return fn

    def _calls(self, tokens, dtype, backward):
        """(direction, program text) of each program a step of this layer
        on `tokens` tokens in `dtype` calls (prebuild)."""
        raise NotImplementedError

    def _staged(self, fn, args):
        """args with the tensors a one-kernel collective reads in the peers'
        memory copied into the arena, where they lie outside it (P > 1)."""
        window = getattr(fn, "_window", None)
        if self.ranks == 1 or not window or not window[0] or fn._nccl_path:
            return args
        args = dict(args)
        for i in window[0]:
            name = fn.spec.inputs[i].name
            t = args[name]
            if in_arena(t, self.group):
                continue
            buf = self._stage.get(name)
            if buf is None or buf.numel() < t.numel() or buf.dtype != t.dtype:
                buf = self._stage[name] = empty([t.numel()], t.dtype, self.group)
            args[name] = buf[:t.numel()].view(t.shape).copy_(t)
        return args

    def _run(self, fn, args, seed=None):
        """Runs fn on args; its outputs by name, each a new tensor: written
        there by the call where no peer reaches it, else copied out of the
        call's arena buffer (reused by its next call)."""
        fresh = self._fresh_outputs(fn)
        res = fn(self._staged(fn, args), seed=seed, out=fresh)
        if not isinstance(res, dict):
            res = {fn.spec.outputs[0].name: res}
        return {k: v if k in fresh else v.clone() for k, v in res.items()}

    def _fresh_outputs(self, fn):
        """New tensors for the outputs that may lie outside the arena: all
        of them at one rank or on the NCCL path, else those that no
        one-kernel collective writes in the peers' memory (tp_programs
        update no input: no output is an input's tensor)."""
        window = getattr(fn, "_window", None)
        reached = window[1] if window and self.ranks > 1 and not fn._nccl_path else ()
        return {o.name: torch.empty(o.shape, dtype=TORCH_TYPES[o.type], device=self.sess.device)
                for k, o in enumerate(fn.spec.outputs) if k not in reached}

    def _mark(self, p, dim):
        """Megatron's attributes on a parameter."""
        p.tensor_model_parallel = dim is not None
        p.partition_dim = dim if dim is not None else -1
        p.partition_stride = 1
        p.sequence_parallel = False  # a whole parameter's gradient is whole: no all-reduce
        return p

    def _param(self, whole, kind, name):
        """This rank's part of a whole parameter, as a Parameter."""
        part = L.shard(whole, kind, name, self.rank, self.ranks)
        p = torch.nn.Parameter(part.to(self.sess.device).contiguous())
        return self._mark(p, L.partition_dim(kind, name))

    def _gather_parts(self, t):
        """Every rank's t (a list in rank order; collective)."""
        if self.ranks == 1:
            return [t.detach()]
        parts = [torch.empty_like(t) for _ in range(self.ranks)]
        dist.all_gather(parts, t.detach().contiguous(), group=self.group)
        return parts


def _linear_init(in_features, out_features, bias, dtype):
    """nn.Linear's initialisation of the whole weight and bias, drawn from
    torch's default generator: the same on every rank, whatever P."""
    w = torch.empty(out_features, in_features, dtype=torch.float32)
    torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    b = None
    if bias:
        bound = 1 / math.sqrt(in_features)
        b = torch.empty(out_features, dtype=torch.float32).uniform_(-bound, bound)
    return w.to(dtype), (b.to(dtype) if b is not None else None)


class _LinearLayer(_Layer):
    """ColumnParallelLinear's and RowParallelLinear's parameters, weights
    in and out of Megatron's checkpoints."""

    def __init__(self, in_features, out_features, bias, sequence_parallel, group, schedule,
                 dtype, init):
        super().__init__(sequence_parallel, group, schedule)
        self.in_features, self.out_features = int(in_features), int(out_features)
        _type_name(dtype)
        w, b = init if init is not None else _linear_init(in_features, out_features, bias,
                                                          dtype)
        self.weight = self._param(w.to(dtype), self.kind, "weight")
        self.bias = self._param(b.to(dtype), self.kind, "bias") if bias else None

    @classmethod
    def from_full(cls: Type[Layer], weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  **kw: Any) -> Layer:
        """A layer holding this rank's part of the whole `weight` ([out,
        in], nn.Linear's) and `bias` (the same on every rank)."""
        kw.setdefault("dtype", weight.dtype)
        return cls(weight.shape[1], weight.shape[0], bias=bias is not None,
                   init=(weight.detach().cpu(), None if bias is None else bias.detach().cpu()),
                   **kw)

    @classmethod
    def from_megatron(cls: Type[Layer], state_dicts: Sequence[Mapping[str, Any]],
                      **kw: Any) -> Layer:
        """A layer from Megatron's state dicts of the layer, one a
        tensor-parallel rank (saved at any size), in rank order."""
        ws = [sd["weight"].detach().cpu() for sd in state_dicts]
        bs = [sd["bias"].detach().cpu() for sd in state_dicts if sd.get("bias") is not None]
        if bs and len(bs) != len(state_dicts):
            raise CocoError("%s.from_megatron: %d of the %d state dicts have a bias: all or "
                            "none must" % (cls.__name__, len(bs), len(state_dicts)))
        w = L.join(ws, cls.kind, "weight", torch.cat)
        b = L.join(bs, cls.kind, "bias", torch.cat) if bs else None
        return cls.from_full(w, b, **kw)

    def to_megatron(self, ranks: Optional[int] = None) -> List[Dict[str, torch.Tensor]]:
        """This layer's weights as Megatron saves them at tensor-parallel
        size `ranks` (default: this group's): a list of state dicts, one a
        rank (collective: every rank of the group calls it)."""
        ranks = ranks or self.ranks
        out: List[Dict[str, torch.Tensor]] = [{} for _ in range(ranks)]
        for name in ("weight", "bias"):
            p = getattr(self, name)
            if p is None:
                continue
            parts = [t.cpu() for t in self._gather_parts(p)]
            for sd, t in zip(out, L.to_megatron(parts, self.kind, name, ranks, torch.cat)):
                sd[name] = t.clone()
        return out

    def _calls(self, tokens, dtype, backward):
        name = _type_name(dtype)
        return [(d, _text(self._write, d, name, self.sequence_parallel, self.bias is not None))
                for d in _directions(backward)]

    def _cast(self, x):
        """x, weight and bias in the call's type (autocast's, if on)."""
        dt = _compute_dtype(x)
        _type_name(dt)
        b = self.bias.to(dt) if self.bias is not None else None
        return x.to(dt), self.weight.to(dt), b

    def extra_repr(self) -> str:
        return "in_features=%d, out_features=%d, bias=%s, sequence_parallel=%s, ranks=%d" % (
            self.in_features, self.out_features, self.bias is not None, self.sequence_parallel,
            self.ranks)


# ---- the linear layers' passes ----

def _linear_args(x2, w, b):
    """coconet::tp_pass's names and tensors for a linear layer's forward"""
    return ("x,w,b", [x2, w, b]) if b is not None else ("x,w", [x2, w])


def _linear_forward(ctx, write, x2, w, b, layer, tokens):
    """A linear layer's forward program (write: tp_programs.column_parallel
    or row_parallel) on this call's tokens; its outputs by name"""
    text = _text(write, "forward", _type_name(x2.dtype), layer.sequence_parallel, b is not None)
    args = {"x": x2, "w": w}
    if b is not None:
        args["b"] = b
    ctx.layer, ctx.write, ctx.has_bias = layer, write, b is not None
    return layer._run(layer._fn("forward", text, tokens), args)


def _linear_backward(ctx, dy, kept):
    """Its backward program: dx, dw, db from dy, the input the forward kept
    (named `kept` in the program) and w"""
    x, w = ctx.saved_tensors
    layer = ctx.layer
    text = _text(ctx.write, "backward", _type_name(w.dtype), layer.sequence_parallel,
                 ctx.has_bias)
    out = layer._run(layer._fn("backward", text, x.shape[0]),
                     {"dy": dy.to(w.dtype).contiguous(), kept: x, "w": w})
    return out["dx"], out["dw"], out.get("db"), None


# ---- ColumnParallelLinear ----

class _Column(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, w, b, layer):
        tokens = x2.shape[0] * (layer.ranks if layer.sequence_parallel else 1)
        out = _linear_forward(ctx, layer._write, x2, w, b, layer, tokens)
        ctx.save_for_backward(out.get("g", x2), w)  # dW reads the gathered input
        return out["y"]

    @staticmethod
    def backward(ctx, dy):
        return _linear_backward(ctx, dy, "g")


class _GatherLast(torch.autograd.Function):
    """Every rank's slice joined along the last dimension; backward: this
    rank's slice of the gradient (Megatron's gather_from_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, y, layer):
        ctx.layer = layer
        return torch.cat(layer._gather_parts(y), dim=-1)

    @staticmethod
    def backward(ctx, g):
        layer = ctx.layer
        return L.cut(g, g.dim() - 1, layer.rank, layer.ranks).contiguous(), None


class ColumnParallelLinear(_LinearLayer):
    """y = x W^T + b with W's rows (the output features) sliced over the
    ranks: weight [out/P, in], bias [out/P]; the output is this rank's
    features (gather_output: all of them). See the module's documentation."""
    kind = "column"
    _write = staticmethod(tp_programs.column_parallel)

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 gather_output: bool = False, sequence_parallel: bool = False,
                 group: "Optional[ProcessGroup]" = None, schedule: Optional[str] = None,
                 dtype: torch.dtype = torch.float32, init: Init = None) -> None:
        if gather_output and sequence_parallel:
            raise CocoError("ColumnParallelLinear: gather_output and sequence_parallel "
                            "exclude each other (as in Megatron)")
        super().__init__(in_features, out_features, bias, sequence_parallel, group, schedule,
                         dtype, init)
        self.gather_output = bool(gather_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise CocoError("ColumnParallelLinear: input of %d features; expected %d"
                            % (x.shape[-1], self.in_features))
        x, w, b = self._cast(x)
        lead = list(x.shape[:-1])
        x2 = x.reshape(-1, self.in_features).contiguous()
        traced = _ops.traced([x2])  # torch.compile, export, fake or meta tensors
        y = _tp_ops.forward(self, *_linear_args(x2, w, b))[0] if traced else \
            _Column.apply(x2, w, b, self)
        if self.sequence_parallel:
            lead[0] *= self.ranks
        y = y.view(lead + [y.shape[-1]])
        if not self.gather_output:
            return y
        return _tp_ops.gather_last(self, y) if traced else _GatherLast.apply(y, self)


# ---- RowParallelLinear ----

class _Row(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, w, b, layer):
        out = _linear_forward(ctx, layer._write, x2, w, b, layer, x2.shape[0])
        ctx.save_for_backward(x2, w)
        return out["y"]

    @staticmethod
    def backward(ctx, dy):
        return _linear_backward(ctx, dy, "x")


class _ScatterLast(torch.autograd.Function):
    """This rank's slice of the last dimension; backward: every rank's
    gradient joined (Megatron's scatter_to_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.layer = layer
        return L.cut(x, x.dim() - 1, layer.rank, layer.ranks).contiguous()

    @staticmethod
    def backward(ctx, g):
        return torch.cat(ctx.layer._gather_parts(g.contiguous()), dim=-1), None


class RowParallelLinear(_LinearLayer):
    """y = x W^T + b with W's columns (the input features) sliced over the
    ranks: weight [out, in/P], bias [out] whole on every rank; the input is
    this rank's features (input_is_parallel=False: all of them, sliced
    here); the output is whole, or this rank's tokens (the first dimension
    sliced) with sequence parallelism. See the module's documentation."""
    kind = "row"
    _write = staticmethod(tp_programs.row_parallel)

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 input_is_parallel: bool = True, sequence_parallel: bool = False,
                 group: "Optional[ProcessGroup]" = None, schedule: Optional[str] = None,
                 dtype: torch.dtype = torch.float32, init: Init = None) -> None:
        if sequence_parallel and not input_is_parallel:
            raise CocoError("RowParallelLinear: sequence_parallel needs input_is_parallel "
                            "(as in Megatron)")
        super().__init__(in_features, out_features, bias, sequence_parallel, group, schedule,
                         dtype, init)
        self.input_is_parallel = bool(input_is_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        traced = _ops.traced([x])  # torch.compile, export, fake or meta tensors
        if not self.input_is_parallel:
            x = _tp_ops.scatter_last(self, x) if traced else _ScatterLast.apply(x, self)
        k = self.in_features // self.ranks
        if x.shape[-1] != k:
            raise CocoError("RowParallelLinear: input of %d features on this rank; expected "
                            "%d (%d over %d ranks)" % (x.shape[-1], k, self.in_features,
                                                       self.ranks))
        x, w, b = self._cast(x)
        lead = list(x.shape[:-1])
        if self.sequence_parallel:
            if lead[0] % self.ranks:
                raise CocoError("RowParallelLinear: with sequence parallelism the first "
                                "dimension (%d) must be a multiple of the %d ranks"
                                % (lead[0], self.ranks))
            lead[0] //= self.ranks
        x2 = x.reshape(-1, k).contiguous()
        y = _tp_ops.forward(self, *_linear_args(x2, w, b))[0] if traced else \
            _Row.apply(x2, w, b, self)
        return y.view(lead + [self.out_features])


# ---- RowParallelLinear + bias + dropout + residual + LayerNorm / RMSNorm ----

class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, w, b, r2, gamma, beta, layer, p_drop, seed=None):
        dtype = _type_name(x2.dtype)
        text = layer._text("forward", dtype, p_drop)
        if seed is None and p_drop > 0:  # (a traced call's comes drawn: tp_ops.seed)
            seed = _draw_seed()
        args = {"x": x2, "w": w, "b": b, "r": r2, "gamma": gamma, "hn": float(layer.out_features)}
        if beta is not None:
            args["beta"] = beta
        out = layer._run(layer._fn("forward", text, x2.shape[0]), args, seed=seed)
        ctx.save_for_backward(x2, w, out["z"], gamma)
        ctx.layer, ctx.p_drop, ctx.seed, ctx.has_beta = layer, p_drop, seed, beta is not None
        return out["out"], out["z"]

    @staticmethod
    def backward(ctx, dout, dz):
        x2, w, z, gamma = ctx.saved_tensors
        layer = ctx.layer
        text = layer._text("backward", _type_name(w.dtype), ctx.p_drop)
        dout = torch.zeros_like(z) if dout is None else dout.to(z.dtype).contiguous()
        dz = torch.zeros_like(z) if dz is None else dz.to(z.dtype).contiguous()
        args = {"dout": dout, "dz": dz, "z": z, "gamma": gamma, "x": x2, "w": w,
                "hn": float(layer.out_features)}
        out = layer._run(layer._fn("backward", text, x2.shape[0]), args, seed=ctx.seed)
        return (out["dx"], out["dw"], out["db"], out["dr"], out["dgamma"], out.get("dbeta"),
                None, None)


class RowParallelLinearNorm(_Layer):
    """norm(dropout(x W^T + b) + residual) and the residual stream z =
    dropout(x W^T + b) + residual: a RowParallelLinear (weight [out, in/P],
    bias [out]) with its bias, dropout, residual and LayerNorm or RMSNorm
    (weight, and bias for LayerNorm: [out]) in its collective.
    forward(x, residual) -> (out, z), both whole on every rank. See the
    module's documentation."""
    kind = "norm"

    def __init__(self, in_features: int, out_features: int, norm: str = "layernorm",
                 p_drop: float = 0.1, eps: float = 1e-5, sequence_parallel: bool = False,
                 group: "Optional[ProcessGroup]" = None, schedule: Optional[str] = None,
                 dtype: torch.dtype = torch.float32,
                 init: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> None:
        super().__init__(sequence_parallel, group, schedule)
        if norm not in tp_programs.NORMS:
            raise CocoError("RowParallelLinearNorm: norm '%s': expected 'layernorm' or "
                            "'rmsnorm'" % norm)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.norm, self.p_drop, self.eps = norm, float(p_drop), float(eps)
        _type_name(dtype)
        w, b = init if init is not None else _linear_init(in_features, out_features, True, dtype)
        self.weight = self._param(w.to(dtype), "row", "weight")
        self.bias = self._param(b.to(dtype), "row", "bias")
        self.norm_weight = self._param(torch.ones(out_features, dtype=dtype), "row", "bias")
        self.norm_bias = (self._param(torch.zeros(out_features, dtype=dtype), "row", "bias")
                          if norm == "layernorm" else None)

    @classmethod
    def from_full(cls, weight: torch.Tensor, bias: torch.Tensor,
                  norm_weight: torch.Tensor, norm_bias: Optional[torch.Tensor] = None,
                  **kw: Any) -> "RowParallelLinearNorm":
        """A layer holding this rank's part of the whole projection `weight`
        ([out, in]) and `bias`, and the norm's weight and bias ([out])."""
        kw.setdefault("dtype", weight.dtype)
        layer = cls(weight.shape[1], weight.shape[0], init=(weight.detach().cpu(),
                                                            bias.detach().cpu()), **kw)
        with torch.no_grad():
            layer.norm_weight.copy_(norm_weight)
            if layer.norm_bias is not None:
                layer.norm_bias.copy_(norm_bias)
        return layer

    def _text(self, direction, dtype, p_drop):
        return _text(tp_programs.norm_after_row_parallel, direction, dtype, self.norm, p_drop,
                     self.eps)

    def _active_p(self):
        """Dropout's probability in this mode (none in eval)"""
        return self.p_drop if self.training else 0.0

    def _calls(self, tokens, dtype, backward):
        name, p = _type_name(dtype), self._active_p()
        return [(d, self._text(d, name, p)) for d in _directions(backward)]

    def forward(self, x: torch.Tensor, residual: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        k = self.in_features // self.ranks
        if x.shape[-1] != k or residual.shape[-1] != self.out_features:
            raise CocoError("RowParallelLinearNorm: x of %d features on this rank (expected "
                            "%d) and a residual of %d (expected %d)"
                            % (x.shape[-1], k, residual.shape[-1], self.out_features))
        dt = _compute_dtype(x)
        _type_name(dt)
        lead = list(x.shape[:-1])
        p = self._active_p()
        beta = self.norm_bias.to(dt) if self.norm_bias is not None else None
        args = (x.to(dt).reshape(-1, k).contiguous(), self.weight.to(dt), self.bias.to(dt),
                residual.to(dt).reshape(-1, self.out_features).contiguous(),
                self.norm_weight.to(dt), beta)
        if _ops.traced(args):  # torch.compile, export, fake or meta tensors
            tensors = [t for t in args if t is not None] + ([_tp_ops.seed()] if p > 0 else [])
            names = "x,w,b,r,gamma" + (",beta" if beta is not None else "") + \
                (",seed" if p > 0 else "")
            out, z = _tp_ops.forward(self, names, tensors, p)
        else:
            out, z = _Norm.apply(*args, self, p)
        shape = lead + [self.out_features]
        return out.view(shape), z.view(shape)

    def extra_repr(self) -> str:
        return "in_features=%d, out_features=%d, norm=%s, p_drop=%g, sequence_parallel=%s" % (
            self.in_features, self.out_features, self.norm, self.p_drop, self.sequence_parallel)


# ---- building ahead ----

def prebuild(model: torch.nn.Module, tokens: int, dtype: Optional[torch.dtype] = None,
             backward: Optional[bool] = None, jobs: Optional[int] = None,
             optimizer: Optional[torch.optim.Optimizer] = None) -> int:
    """Builds ahead, `jobs` at a time (default: the cores, at most 16), the
    programs that the tp layers of `model` call on a step of `tokens`
    tokens (sequence x batch, whole: before sequence parallelism slices
    them) in `dtype` (default: each layer's weights' type; give autocast's
    type where the step runs under autocast), their backward too where
    `backward` (default: model.training), and with them those of the first
    step of `optimizer` (a coconet.torch.optim optimizer: its step over
    every parameter that requires a gradient). Their first calls then find
    them built, instead of building one after another. Every rank may call
    it: the first rank of a machine builds, the others find the objects in
    the cache. Returns how many of the model's calls it prepared."""
    steps_ahead = getattr(optimizer, "_builds_ahead", None)
    if optimizer is not None and steps_ahead is None:
        raise CocoError("coconet.torch.tp.prebuild: optimizer=%s is not a coconet.torch.optim "
                        "optimizer (whose programs it would build)" % type(optimizer).__name__)
    if backward is None:
        backward = model.training
    # _bound key -> (layer, direction, text, tokens)
    plan: Dict[tuple, Tuple[Any, str, str, int]] = {}
    for layer in model.modules():
        if isinstance(layer, _Layer):
            dt = dtype or layer.weight.dtype
            for direction, text in layer._calls(int(tokens), dt, backward):
                key = layer._bound_key(direction, text, int(tokens))
                if key not in _bound:
                    plan.setdefault(key, (layer, direction, text, int(tokens)))
    todo, seen = [], set()
    for layer, direction, text, t in plan.values():
        name, schedule, sizes = layer._choice(direction, text, t)
        built = _compiled_key(text, schedule, layer.group)
        if built in _compiled or built in seen:
            continue
        seen.add(built)
        todo.append((_write_program(text, name), schedule, sizes, layer.ranks,
                     getattr(layer.sess, "nccl_home", None)))
    if steps_ahead is not None:
        todo += steps_ahead()
    if todo:
        with build_lock():
            _build_programs(todo, jobs or min(16, os.cpu_count() or 1))
    for layer, direction, text, t in plan.values():
        layer._fn(direction, text, t)
    return len(plan)


def _build_programs(todo, jobs):
    """Builds each (path, schedule, sizes, ranks, nccl_home) of todo into
    the cache, `jobs` at a time; raises CocoError naming the programs that
    could not be built."""
    failed = build_parallel(todo, jobs)
    if failed:
        raise CocoError("coconet.torch.tp.prebuild: %d of %d programs could not be built:\n%s"
                        % (len(failed), len(todo), "\n".join(failed)))
