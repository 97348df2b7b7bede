"""coconet.torch.ops: coconet calls as torch.library custom ops, so that
torch.compile (fullgraph=True), torch.export and fake or meta tensors see
them as one operator each, with no graph break:

  coconet::call(key, out_mask, reads, writes, scalars, seed) -> ()
      one call of a Compiled variant (key: its entry in the registry):
      reads, the tensor inputs it only reads (a scattered input's members
      in order); writes, the inputs it updates, then a tensor for each other
      output (out_mask: bit k set where output k is the caller's `out`, else
      a new tensor the op fills); scalars, a CPU float64 tensor of the
      Scalars in input order (a tensor, so a changing learning rate or step
      does not recompile); seed, -1 for the variant's next.
  coconet::row_parallel(key, x, weight, bias, residual, p_drop) -> Tensor
      RowParallelLinear's forward (key: the layer), a new tensor, with its
      autograd registered.

Eager calls on plain tensors keep the direct path (no dispatcher, no
copy); traced ones (under torch.compile or export, or on fake or meta
tensors) take these ops, whose real implementations run that same direct
path, so compiled and eager calls launch the same kernels on the same
values. An output the variant writes into its own arena buffer (where the
fused collective reaches the peers' copies) is copied into the op's new
tensor. The fake implementations write nothing (call) or give the output's
shape (row_parallel)."""
import itertools
import weakref
from typing import Any, Iterable, List, Mapping, Optional

import torch

from .. import CocoError

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_targets: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()  # key -> a Compiled or a RowParallelLinear
_keys = itertools.count()


def register(target: Any) -> int:
    """A key under which the ops find target (held weakly)."""
    key = next(_keys)
    _targets[key] = target
    return key


def _target(key):
    t = _targets.get(key)
    if t is None:
        raise CocoError("coconet.torch: a traced coconet call's callable (key %d) no longer "
                        "exists: keep the Compiled, the layer or the optimizer alive while "
                        "its graph runs" % key)
    return t


def _first_tensor(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            v = next((t for t in v if isinstance(t, torch.Tensor)), None)
        if isinstance(v, torch.Tensor):
            return v
    return None


def traced(values: Iterable[Any]) -> bool:
    """Does a call on these values (tensors, lists of them, numbers) go
    through the ops: under torch.compile or export, or on a fake, meta or
    other tensor subclass?"""
    if torch.compiler.is_compiling():
        return True
    t = _first_tensor(values)
    return t is not None and (type(t) not in _PLAIN or t.is_meta)


# ---- coconet::call ----

def _written(f):
    """The indices of f's inputs that it updates (an output is their new value)."""
    return {a for a in f._call.alias if a >= 0}


def _scalars(values):
    if not values:
        return torch.empty(0, dtype=torch.float64)
    return torch.stack([torch.as_tensor(v, dtype=torch.float64).reshape(()) for v in values])


def _flatten(f, given, out):
    """coconet::call's arguments for f(given, out=out), and the results as
    the call returns them (a list in output order)."""
    written = _written(f)
    reads, writes, scalars = [], [], []
    for i, spec in enumerate(f.spec.inputs):
        if spec.name not in given:
            raise CocoError("'%s' needs input '%s' (%s)"
                            % (f.variant, spec.name, f.spec.expect(spec)))
        v = given[spec.name]
        if spec.kind == "scalar":
            scalars.append(v)
        else:
            (writes if i in written else reads).extend(v if spec.kind == "scattered" else [v])
    first = _first_tensor(reads + writes)
    device = first.device if first is not None else f.group.device
    mask, results = 0, []
    for k, o in enumerate(f.spec.outputs):
        a = f._call.alias[k]
        if a >= 0:
            results.append(given[f.spec.inputs[a].name])
            continue
        t = out.get(o.name) if out else None
        if t is None:
            t = torch.empty(o.shape, dtype=_torch_type(o.type), device=device)
        else:
            mask |= 1 << k
        writes.append(t)
        results.append(t)
    return reads, writes, _scalars(scalars), mask, results


def _torch_type(name):
    from . import TORCH_TYPES
    return TORCH_TYPES[name]


def _unflatten(f, mask, reads, writes, scalars):
    """(given, out, [(k, tensor the op fills)]): _flatten undone."""
    written, r, w = _written(f), iter(reads), iter(writes)
    values = iter(scalars.tolist())
    given = {}
    for i, spec in enumerate(f.spec.inputs):
        if spec.kind == "scalar":
            given[spec.name] = next(values)
            continue
        src = w if i in written else r
        ts = [next(src) for _ in range(len(spec.members) if spec.kind == "scattered" else 1)]
        given[spec.name] = ts if spec.kind == "scattered" else ts[0]
    out, fill = {}, []
    for k, o in enumerate(f.spec.outputs):
        if f._call.alias[k] < 0:
            t = next(w)
            if mask >> k & 1:
                out[o.name] = t
            else:
                fill.append((k, t))
    return given, out, fill


@torch.library.custom_op("coconet::call", mutates_args=("writes",))
def _call_op(key: int, out_mask: int, reads: List[torch.Tensor], writes: List[torch.Tensor],
             scalars: torch.Tensor, seed: int) -> None:
    f = _target(key)
    given, out, fill = _unflatten(f, out_mask, reads, writes, scalars)
    res = f(given, seed=None if seed < 0 else seed, out=out or None)
    got = [res] if len(f.spec.outputs) == 1 else [res[o.name] for o in f.spec.outputs]
    for k, t in fill:
        t.copy_(got[k])


@_call_op.register_fake
def _call_fake(key, out_mask, reads, writes, scalars, seed):
    return None  # every result is a given tensor, updated in place


def call(f: Any, given: Mapping[str, Any], seed: Optional[int],
         out: Optional[Mapping[str, torch.Tensor]]) -> Any:
    """f(given, seed=seed, out=out) through coconet::call; the result as the
    direct call returns it."""
    reads, writes, scalars, mask, results = _flatten(f, given, out)
    torch.ops.coconet.call(f._key, mask, reads, writes, scalars,
                           -1 if seed is None else int(seed))
    if len(results) == 1:
        return results[0]
    return {o.name: r for o, r in zip(f.spec.outputs, results)}


# ---- coconet::row_parallel ----

@torch.library.custom_op("coconet::row_parallel", mutates_args=())
def _row_parallel(key: int, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  residual: Optional[torch.Tensor], p_drop: float) -> torch.Tensor:
    layer = _target(key)
    return layer._run(x, residual, p_drop, residual is not None, weight, bias).clone()


@_row_parallel.register_fake
def _row_parallel_fake(key, x, weight, bias, residual, p_drop):
    return x.new_empty(tuple(x.shape[:-1]) + (weight.shape[1],))


def _row_parallel_setup(ctx, inputs, output):
    _, x, weight, _, residual, _ = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_residual = residual is not None


def _row_parallel_backward(ctx, g):
    """The AllReduce's gradient is the identity: grad_x = g W^T (this rank's
    slice), grad_W = x^T g (its rows), grad_b = the sum of g, grad_r = g."""
    x, weight = ctx.saved_tensors
    g2 = g.reshape(-1, g.shape[-1])
    grad_x = (g2 @ weight.t()).view(x.shape)
    grad_w = x.reshape(-1, x.shape[-1]).t() @ g2
    return None, grad_x, grad_w, g2.sum(0), (g if ctx.has_residual else None), None


_row_parallel.register_autograd(_row_parallel_backward, setup_context=_row_parallel_setup)


def row_parallel(layer: Any, x: torch.Tensor, residual: Optional[torch.Tensor],
                 p_drop: float) -> torch.Tensor:
    """layer's forward (a coconet.torch.nn.RowParallelLinear) through
    coconet::row_parallel."""
    return torch.ops.coconet.row_parallel(layer._key, x, layer.weight, layer.bias, residual,
                                          float(p_drop))
