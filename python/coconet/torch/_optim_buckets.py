"""coconet.torch.optim's overlap with the backward pass (overlap=True):
the post-accumulate-grad hooks, the buckets started on a side stream as
their gradients become final, no_sync, and rank 0's order of the
backward."""
import contextlib
import weakref
from typing import Iterator

import torch
import torch.distributed as dist

from . import CocoError
from .. import optplan
from ._optim_part import _Part


def _hook(ref, k):
    """Parameter k's post-accumulate-grad hook: the optimizer's _on_grad,
    while the optimizer lives and still owns the parameter (an optimizer
    made later over the same parameters takes them over)."""
    def hook(p):
        opt = ref()
        if opt is not None and getattr(p, "_coconet_optimizer", None) is ref:
            opt._on_grad(k, p)
    return hook


class _Buckets(_Part):
    """Mixin of optim._Fused: the gradients' hook and the side stream."""

    def _on_grad(self, k, p):
        """Post-accumulate-grad hook: the gradient into the arena (a copy
        where autograd made a new tensor), the hooks' order noted, and in
        the overlapped mode the buckets now ready started."""
        g = self._grads.get(k)
        if g is not None and p.grad is not g:
            with torch.no_grad():
                if p.grad is None or p.grad.data_ptr() != g.data_ptr():
                    g.copy_(p.grad)
                p.grad = g
        if self._recording:
            self._order.append(k)
        if self._launcher is not None and not self._no_sync:
            for i in self._launcher.ready(k):
                self._start(self._units[i])

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradient accumulation: backward passes inside accumulate the
        gradients and start nothing; the last micro-batch's backward, outside,
        starts the buckets (overlap=True), or step() does."""
        old, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = old

    def _start(self, u):
        """In the overlapped mode: the unit's step on the side stream, after
        what the current stream has enqueued (its gradients). The first of
        a step's units starts the step's found anew."""
        if not self._launched:
            self._found = None
        self._side.wait_stream(torch.cuda.current_stream(self._sess.device))
        with torch.cuda.stream(self._side):
            self._launch(u)
        self._launched.append(u)

    def _sync_side(self):
        if self._side is not None:
            torch.cuda.current_stream(self._sess.device).wait_stream(self._side)

    # ---- a GradScaler's step (coconet.torch.GradScaler) ----

    def _stepped_by(self, scaler):
        """coconet.torch.GradScaler.step's call before it steps this
        optimizer (scaler), and after (None)."""
        self._stepping_scaler = scaler

    def _begin_amp_step(self):
        """At step()'s entry: the step's found starts anew unless buckets
        ran in the backward pass (theirs count); with overlap=True, a scaled
        step must come from a coconet.torch.GradScaler (the buckets of the
        next backward pass read its scale), and the buckets started in the
        backward pass must have been scaled as this step is, by the same
        scaler."""
        if not self._launched:
            self._found = None
        if not self._overlap:
            return
        amp, scaler = self._amp_given(), self._stepping_scaler
        if amp and scaler is None:
            raise CocoError("coconet.torch.optim: a GradScaler with overlap=True must be "
                            "coconet.torch.GradScaler: the buckets stepped during the backward "
                            "pass read its scale when they start, and torch's GradScaler gives "
                            "the scale only to step(); use coconet.torch.GradScaler (the same "
                            "arguments), or overlap=False")
        started = {bool(dict(u.options).get("amp")) for u in self._launched}
        if started - {amp}:
            raise CocoError("coconet.torch.optim: the buckets stepped during this backward pass "
                            "were %s, but this step is %s: with overlap=True, call "
                            "scaler.step(opt) at every step or at none (a backward pass steps "
                            "as the last step did)"
                            % (("scaled by a GradScaler", "not scaled") if not amp else
                               ("not scaled", "scaled by a GradScaler")))
        if amp and started and self._scaler is not None and self._scaler() is not scaler:
            raise CocoError("coconet.torch.optim: the buckets stepped during this backward pass "
                            "read the scale of the GradScaler of the last step, not of the one "
                            "now stepping: with overlap=True, change the GradScaler only before "
                            "a backward pass whose buckets do not start (a new optimizer's "
                            "first step)")
        if amp:
            self._scaler = weakref.ref(scaler)

    def _unit_scale(self, u):
        """The scale unit u's gradients carry: within a GradScaler's step,
        the grad_scale it gives; for a scaled bucket started during the
        backward pass, the scale tensor of the GradScaler of the last step
        (read on the stream when the bucket starts: scale(loss) multiplied
        by it, and update() changes it in place before the next)."""
        if self._amp_given() or not dict(u.options).get("amp"):
            return getattr(self, "grad_scale", None)
        scaler = self._scaler() if self._scaler is not None else None
        scale = scaler._scale_tensor() if scaler is not None else None
        if scale is None:
            raise CocoError("coconet.torch.optim: a bucket started during the backward pass "
                            "steps under a GradScaler, but the coconet.torch.GradScaler of the "
                            "last step is gone (or has no scale): keep it for the whole "
                            "training")
        return scale

    def _rank0_order(self):
        """Rank 0's order of the first backward pass, on every rank (a plan
        made alike everywhere starts the same collectives in the same order)."""
        order = optplan.full_order(self._order, range(len(self._params)))
        t = torch.tensor(order, dtype=torch.int64)
        if self._cpu is None:
            t = t.to(self._sess.device)
        src = dist.get_global_rank(self._pg, 0) if self._pg is not None else 0
        dist.broadcast(t, src=src, group=self._cpu if self._cpu is not None else self._pg)
        return t.tolist()
