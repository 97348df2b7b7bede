"""coconet.torch.nn: Megatron-LM's row-parallel linear layer with its bias,
dropout and residual, out = dropout(x @ W + b) + r, as one coconet program
(coconet.programs.row_parallel, examples/self_attention.coco's layer), for
inference. For training, coconet.torch.tp has Megatron's column- and
row-parallel layers (its weight layouts; sequence parallelism; the norm
after the projection fused) with both passes coconet programs.

Each rank holds a slice of the input along its last dimension (x: [B, S,
K/P]) and the matching rows of the weight (weight: [K/P, H]); the partial
products are summed over the ranks. The forward runs the schedule given
(default `paper`: ol(MM,fuse(RS-C-AG)), the MatMul overlapped with one
FusedAllReduce that adds the bias, applies dropout and adds the residual on
each rank's slice and gathers the result; `fused`: the same without the
overlap; `program`: MatMul, AllReduce and a pointwise kernel; each can be
captured in a CUDA graph after a first call at its shape). Which program runs:
  - eval mode (or p = 0): out = AllReduce(x @ W) + b + r, all fused;
  - training mode, gradients off: the same with dropout inside (its mask
    from the call's seed);
  - training mode with gradients: the program computes y = AllReduce(x @ W)
    + b, and torch applies dropout and adds r, so that autograd keeps the
    mask (the fused kernel does not give it back).
The backward is written in torch: the AllReduce's gradient is the identity
(every rank already holds the whole output gradient), so grad_x = g @ W^T
(this rank's slice), grad_W = x^T g (this rank's rows), grad_b = sum of g,
grad_r = g.

Buffers: the output (and the residual when it is a previous layer's
output) lies in the arena, where the fused collective reaches the peers'
copies; each layer keeps its own output buffer of max_tokens x H (made at
the first call, larger when a call needs more), so an output is valid until
the same layer's next call: copy it to keep it longer (training clones
it for autograd). Calls of one program at one shape share its workspace:
run them on one stream.

torch.compile, export and the meta device: traced, forward is one custom
op, coconet::row_parallel (coconet.torch.ops), returning a new tensor, its
backward registered. A layer made under torch.device("meta") holds meta
parameters and no arena memory; to_empty(device="cuda"), then
reset_parameters or load_state_dict, gives it GPU parameters with the bias
in the arena (_apply puts it back there after any move)."""
import math
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from . import CocoError, TYPE_NAMES, compile as _compile, empty, \
    in_arena, session, to_arena
from . import ops as _ops
from ._build import cache_dir as _cache_dir
from .. import programs

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

_compiled: Dict[tuple, Any] = {}


def _program(dtype, p_drop, residual, schedule, group):
    """The compiled program (one build, one load) for these settings."""
    key = (dtype, p_drop, residual, schedule, id(group) if group is not None else None)
    c = _compiled.get(key)
    if c is None:
        import os
        path = programs.write(programs.row_parallel(dtype, p_drop, residual), "row_parallel",
                              os.path.join(_cache_dir(), "torch-programs"))
        c = _compiled[key] = _compile(path, schedule=schedule, group=group)
    return c


class _RowParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, residual, layer):
        out = layer._run(x, residual, p_drop=0.0, with_residual=residual is not None)
        ctx.save_for_backward(x, weight)
        ctx.has_residual = residual is not None
        return out.clone()

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])
        grad_x = (g2 @ weight.t()).view(x.shape)
        grad_w = x.reshape(-1, x.shape[-1]).t() @ g2
        grad_b = g2.sum(0)
        return grad_x, grad_w, grad_b, (g if ctx.has_residual else None), None


class RowParallelLinear(torch.nn.Module):
    """out = dropout(x @ W + b) + r over the ranks of `group`: in_features
    K (sliced over the P ranks: each holds K/P columns of x and rows of W),
    out_features H. See the module's documentation."""

    def __init__(self, in_features: int, out_features: int, p_drop: float = 0.1,
                 residual: bool = True, dtype: torch.dtype = torch.float16,
                 group: "Optional[ProcessGroup]" = None, schedule: str = "paper",
                 max_tokens: Optional[int] = None) -> None:
        super().__init__()
        self.sess = session(group)
        P = self.sess.nranks
        if in_features % P:
            raise CocoError("RowParallelLinear: in_features %d is not a multiple of the %d ranks"
                            % (in_features, P))
        if dtype not in TYPE_NAMES or TYPE_NAMES[dtype] not in programs.TYPES:
            raise CocoError("RowParallelLinear: dtype %s: expected float16, bfloat16 or float32"
                            % dtype)
        self.in_features, self.out_features = in_features, out_features
        self.p_drop, self.residual, self.schedule, self.group = float(p_drop), residual, \
            schedule, group
        self.dtype = dtype
        self._key = _ops.register(self)  # coconet::row_parallel's handle on it
        self._out = None
        self._views: Dict[tuple, torch.Tensor] = {}  # (B, S) -> the output's view of _out
        self._calls: Dict[tuple, Any] = {}  # (B, S, p, residual) -> the program at those sizes
        if torch.empty(0).is_meta:  # under torch.device("meta"): shapes only, no arena
            self.weight = torch.nn.Parameter(torch.empty(in_features // P, out_features,
                                                         dtype=dtype))
            self.bias = torch.nn.Parameter(torch.empty(out_features, dtype=dtype))
            return
        self.weight = torch.nn.Parameter(torch.empty(in_features // P, out_features, dtype=dtype,
                                                     device=self.sess.device))
        # read by the fused collective: in the arena
        self.bias = torch.nn.Parameter(empty([out_features], dtype, group))
        self.reset_parameters()
        if max_tokens:
            self._out = empty([int(max_tokens) * out_features], dtype, group)

    def reset_parameters(self) -> None:
        """The weight uniform in +-1/sqrt(in_features), the bias zero."""
        bound = 1 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.bias.zero_()
            self.weight.uniform_(-bound, bound)

    def _apply(self, fn, *args, **kw):
        """As torch's, then the bias back into the arena where a move (a
        meta-device layer's to_empty, .to) took it out of it."""
        super()._apply(fn, *args, **kw)
        b = self.bias
        if b.is_cuda and not in_arena(b, self.group):
            self.bias.data = to_arena(b.data, self.group)
        return self

    @classmethod
    def from_full(cls, weight: torch.Tensor, bias: torch.Tensor,
                  **kw: Any) -> "RowParallelLinear":
        """A layer whose rank holds its rows of `weight` ([K, H], the same on
        every rank) and `bias` ([H])."""
        kw.setdefault("dtype", weight.dtype)
        layer = cls(weight.shape[0], weight.shape[1], **kw)
        P, r = layer.sess.nranks, layer.sess.rank
        k = weight.shape[0] // P
        with torch.no_grad():
            layer.weight.copy_(weight[r * k:(r + 1) * k])
            layer.bias.copy_(bias)
        return layer

    def _out_buffer(self, B, S_):
        """The output's view of this layer's buffer for B x S_ tokens (the
        buffer grown when a call needs more; the views kept per shape)."""
        view = self._views.get((B, S_))
        if view is not None:
            return view
        n = B * S_ * self.out_features
        if self._out is None or self._out.numel() < n:
            self._out = empty([n], self.dtype, self.group)
            self._views = {}
        view = self._views[(B, S_)] = self._out[:n].view(B, S_, self.out_features)
        return view

    def _run(self, x, residual, p_drop, with_residual, weight=None, bias=None):
        if x.dim() != 3:
            raise CocoError("RowParallelLinear: x must be [B, S, K/P]; given shape %s"
                            % list(x.shape))
        B, S_, k = x.shape
        key = (B, S_, p_drop, with_residual)
        fn = self._calls.get(key)  # the compiled program at these sizes
        if fn is None:
            fn = _program(TYPE_NAMES[self.dtype], p_drop, with_residual, self.schedule, self.group)
            fn = self._calls[key] = fn.at({"B": B, "S": S_, "K": self.in_features,
                                           "H": self.out_features})
        # the tensors as they are (the call reads their storage only; the
        # backward is _RowParallel's)
        args = {"w": self.weight if weight is None else weight, "x": x,
                "b": self.bias if bias is None else bias}
        if with_residual:
            args["r"] = residual
        return fn(args, out={"out": self._out_buffer(B, S_)})

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.residual and residual is None:
            raise CocoError("RowParallelLinear: this layer adds a residual: forward(x, residual)")
        if not self.residual:
            residual = None
        p = self.p_drop if self.training else 0.0
        if _ops.traced([x]):  # torch.compile, export, fake or meta tensors
            return self._forward_op(x, residual, p)
        if not torch.is_grad_enabled() or not (x.requires_grad or self.weight.requires_grad or
                                                self.bias.requires_grad):
            return self._run(x, residual, p, residual is not None)
        if p == 0.0:
            return _RowParallel.apply(x, self.weight, self.bias, residual, self)
        y = _RowParallel.apply(x, self.weight, self.bias, None, self)
        y = torch.nn.functional.dropout(y, p, training=True)
        return y + residual if residual is not None else y

    def _forward_op(self, x, residual, p):
        """forward through coconet::row_parallel: with gradients and dropout,
        the op without them, and torch's dropout and residual (as the
        direct path)."""
        grad = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad or
                                            self.bias.requires_grad)
        if not grad or p == 0.0:
            return _ops.row_parallel(self, x, residual, p)
        y = torch.nn.functional.dropout(_ops.row_parallel(self, x, None, 0.0), p, training=True)
        return y + residual if residual is not None else y
