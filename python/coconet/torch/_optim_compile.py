"""coconet.torch.optim's step under torch.compile: step() traced by dynamo
becomes one custom op,

  coconet::optimizer_step(key, params, grads, grad_scale, found_inf) -> ()
      the fused optimizer's whole step (key: the optimizer, ops.register);
      params, the arena's flat buffers of its trained parameters (each
      parameter a view of one), which the step updates; grads, those of
      their gradients, which it reads; grad_scale and found_inf,
      GradScaler's tensors as step() saw them. The optimizer state, the
      FP32 masters and the step counts are the optimizer's own and never a
      graph's inputs.

Its real implementation runs the eager step on the optimizer's own
tensors, so that a compiled step launches the same programs on the same
values, reading the groups' lr (schedulers), which gradients are None and
the side stream of overlap=True when the graph runs, not when it was
traced. Where the graph hands the op other tensors than the optimizer's (a
functionalizing backend's copies), the op takes their values first (a
change made earlier in the same graph, torch's clip_grad_norm_ of the
gradients, say; not the parameters' with overlap=True, which the backward
pass has stepped already) and writes the new parameters back into them
after the step. A parameter so changed in the graph does not refresh its
FP32 master (an eager in-place change does). The fake implementation
writes nothing."""
import contextlib
from typing import Any, List, Optional

import torch

from . import CocoError
from . import ops


def traced_step(opt: Any, closure: Any) -> None:
    """step() as dynamo traces it: coconet::optimizer_step over the
    optimizer's flat buffers."""
    if closure is not None:
        raise CocoError("coconet.torch.optim: step(closure) is refused under torch.compile: "
                        "the closure's forward and backward cannot run inside the "
                        "optimizer's op; call the closure, then step() with no argument")
    torch.ops.coconet.optimizer_step(opt._step_key, list(opt._flat_params),
                                     [g for g, _ in opt._flats],
                                     getattr(opt, "grad_scale", None),
                                     getattr(opt, "found_inf", None))


def _own(opt, n):
    """The optimizer's flat parameter and gradient buffers, in the op's
    order; refused where the graph's count (n) differs."""
    if len(opt._flats) != n:
        raise CocoError("coconet.torch.optim: a step() compiled over %d flat buffers runs on "
                        "an optimizer that now has %d (add_param_group): compile the step "
                        "again" % (n, len(opt._flats)))
    return list(opt._flat_params), [g for g, _ in opt._flats]


def _foreign(given, own):
    """The pairs (given, own) where the graph gave another tensor than the
    optimizer's."""
    return [(t, o) for t, o in zip(given, own) if t.data_ptr() != o.data_ptr()]


@contextlib.contextmanager
def _amp(opt, grad_scale, found_inf):
    """GradScaler's tensors on the optimizer for the step, as step() saw them."""
    names = ("grad_scale", "found_inf")
    old = {n: opt.__dict__[n] for n in names if n in opt.__dict__}
    for n, v in zip(names, (grad_scale, found_inf)):
        if v is None:
            opt.__dict__.pop(n, None)
        else:
            setattr(opt, n, v)
    try:
        yield
    finally:
        for n in names:
            opt.__dict__.pop(n, None)
        opt.__dict__.update(old)


@torch.library.custom_op("coconet::optimizer_step", mutates_args=("params",))
def _optimizer_step(key: int, params: List[torch.Tensor], grads: List[torch.Tensor],
                    grad_scale: Optional[torch.Tensor],
                    found_inf: Optional[torch.Tensor]) -> None:
    opt = ops._target(key)
    own_p, own_g = _own(opt, len(params))
    foreign_p, foreign_g = _foreign(params, own_p), _foreign(grads, own_g)
    with torch.no_grad():
        for t, o in foreign_g + ([] if opt._overlap else foreign_p):
            o.copy_(t)
        with _amp(opt, grad_scale, found_inf):
            opt._eager_step()
        for t, o in foreign_p:
            t.copy_(o)


@_optimizer_step.register_fake
def _optimizer_step_fake(key, params, grads, grad_scale, found_inf):
    return None  # the parameters, updated in place, are the only result
