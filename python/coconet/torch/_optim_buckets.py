"""coconet.torch.optim's overlap with the backward pass (overlap=True):
the post-accumulate-grad hooks, the buckets started on a side stream as
their gradients become final, no_sync, and rank 0's order of the
backward."""
import contextlib
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
        what the current stream has enqueued (its gradients)."""
        self._side.wait_stream(torch.cuda.current_stream(self._sess.device))
        with torch.cuda.stream(self._side):
            self._launch(u)
        self._launched.append(u)

    def _sync_side(self):
        if self._side is not None:
            torch.cuda.current_stream(self._sess.device).wait_stream(self._side)

    def _refuse_amp_overlap(self):
        if self._overlap and (getattr(self, "grad_scale", None) is not None or
                              getattr(self, "found_inf", None) is not None):
            raise CocoError("coconet.torch.optim: a GradScaler with overlap=True is not "
                            "supported yet: the buckets stepped during the backward pass "
                            "cannot read the step's grad_scale and found_inf; use "
                            "overlap=False")

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
