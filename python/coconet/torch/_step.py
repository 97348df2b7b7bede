"""coconet.torch._step: what one parameter group's fused step reads and
gives beyond its tensors: the 0-dimensional FP32 tensors of its program
variant (coconet.programs.step_inputs' `device`: lr, the step count t,
GradScaler's grad_scale gs and found_inf fin), refreshed before each step
with torch operations only, so that a step captured in a CUDA graph
replays with what they hold at replay time; and its outputs (the clipped
gradient's norm, found). fin stays 0: each step decides on its own summed
gradient (found), not on torch's found_inf, which is this rank's check of
its own gradients (at P > 1 the ranks' differ) and is known only after the
backward pass (the buckets of the overlapped mode start before).

The step count follows torch's fused optimizers: t + 1 before the step,
minus found after it, on the device (a skipped step does not count, and
nothing waits for the host). lr: a tensor lr in the group (torch accepts
one; a scheduler then writes it in place) is copied at each step, so a
replayed graph reads its current value; a float lr is written with fill_,
which a captured graph replays as the value it had at capture."""
from typing import Any, Iterable, Optional, Union

import torch

from . import CocoError, empty

_START = dict(lr=0.0, t=0.0, gs=1.0, fin=0.0)


class DeviceScalars:
    """The device inputs `names` of a variant, in the arena of `group`,
    made once (they stay bound to the program)."""

    def __init__(self, names, group, step=0):
        self.tensors = {}
        for n in names:
            t = empty([], torch.float32, group)
            t.fill_(float(step) if n == "t" else _START[n])
            self.tensors[n] = t

    def before(self, pg, grad_scale=None):
        """Writes the step's values: pg's lr, t + 1, GradScaler's scale (1
        when the step is not scaled); fin keeps its 0 (module doc)."""
        d = self.tensors
        if "lr" in d:
            lr = pg["lr"]
            if isinstance(lr, torch.Tensor):
                d["lr"].copy_(lr.reshape(()))
            else:
                d["lr"].fill_(float(lr))
        if "t" in d:
            d["t"].add_(1)
        if "gs" in d:
            if grad_scale is None:
                d["gs"].fill_(1.0)
            else:
                d["gs"].copy_(grad_scale.reshape(()))

    def after(self, results):
        """Takes a skipped step back from the step count; results: the
        program's outputs by name."""
        if "t" in self.tensors and isinstance(results, dict) and "found" in results:
            self.tensors["t"].sub_(results["found"])

    def step_count(self, host_count):
        """The step count as state_dict gives it: the device's when the
        variant keeps one (a synchronisation), else the host's."""
        t = self.tensors.get("t")
        return float(t) if t is not None else float(host_count)


def clip_grad_norm_(parameters: Union[torch.Tensor, Iterable[torch.Tensor]], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: Optional[bool] = None) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for parameters that a
    coconet.torch.optim optimizer steps: before step() their .grad holds
    each rank's own gradient, whose norm is not the one to clip by (DDP
    clips the averaged gradient). So this clips inside the next step():
    it sets max_grad_norm of the parameter groups that hold these
    parameters (every rank alike), and returns the 0-dimensional tensor
    into which that step writes the total norm of the summed, averaged
    (and unscaled) gradient before clipping: read it after step(), as a
    training loop logs it. Every parameter must belong to one group of one
    such optimizer (with several groups, torch's single total norm would
    span programs that run apart: refused). norm_type 2 only;
    error_if_nonfinite is refused (a non-finite norm under a GradScaler
    skips the step instead); foreach is accepted and ignored. Parameters
    that no coconet optimizer steps are clipped by torch's function."""
    from . import optim
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    params = [p for p in params if p.grad is not None or p.requires_grad]
    found = optim._owner(params)
    if found is None:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type,
                                              error_if_nonfinite, foreach)
    if float(norm_type) != 2.0:
        raise ValueError("coconet.torch.clip_grad_norm_: norm_type %r: the fused step clips by "
                         "the Euclidean norm (2) only" % (norm_type,))
    if error_if_nonfinite:
        raise ValueError("coconet.torch.clip_grad_norm_: error_if_nonfinite=True is not "
                         "supported: the norm is known only inside step() (with a GradScaler "
                         "a non-finite norm skips the step)")
    opt, pg = found
    pg["max_grad_norm"] = float(max_norm)
    return opt._norm_output(pg)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler for coconet.torch.optim optimizers over several
    ranks, or with overlap=True. Such a step decides whether to skip on the
    summed gradient, so every rank skips together; but torch's
    GradScaler.update() halves the scale after checking only this rank's
    own gradients, so after an Inf on one rank the ranks' scales would
    differ. This one, after a step of a coconet optimizer, writes that
    step's found (the same on every rank) into what update() reads. Each
    unit of the step (a parameter group's program, or a bucket with
    overlap=True) decides on its own gradients (its program's found), where
    torch skips every group when any has an Inf; the scale follows the
    largest found. With overlap=True the buckets started during the
    backward pass read this scaler's scale tensor when they start (the one
    scale(loss) multiplied by): step(optimizer) tells the optimizer which
    scaler it is, and its first step runs after its backward pass, as
    every first overlapped step does. unscale_ is refused there (the
    buckets have read the gradients before it). Otherwise torch's
    GradScaler: use it in its place (at one rank without overlap both
    agree)."""

    def step(self, optimizer: torch.optim.Optimizer, *args: Any,
             **kwargs: Any) -> Optional[float]:
        tell = getattr(optimizer, "_stepped_by", None) if self.is_enabled() else None
        if tell is not None:
            tell(self)
        try:
            out = super().step(optimizer, *args, **kwargs)
        finally:
            if tell is not None:
                tell(None)
        found = getattr(optimizer, "_found", None)
        state = self._per_optimizer_states.get(id(optimizer), {})
        if found is not None:
            for t in state.get("found_inf_per_device", {}).values():
                t.copy_(found.reshape(t.shape))
        return out

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if getattr(optimizer, "_overlap", False) and hasattr(optimizer, "_stepped_by"):
            raise CocoError(
                "coconet.torch.GradScaler.unscale_: the optimizer steps with overlap=True: its "
                "buckets read the scaled gradients during the backward pass, before unscale_ "
                "would rewrite them. The step unscales by itself: call scaler.step(optimizer) "
                "without unscale_ (to clip, coconet.torch.clip_grad_norm_ clips inside the step "
                "where each group is one program: bucket_mb=None), or use overlap=False")
        super().unscale_(optimizer)

    def _scale_tensor(self) -> Optional[torch.Tensor]:
        """The scale tensor that scale() multiplies by and update() changes
        in place (None before the first scale())."""
        return self._scale
