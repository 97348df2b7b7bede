"""coconet.torch.optim's step: each unit's program bound to its tensors
and called with its group's Scalars, and the device tensors of its
variant (capturable lr and step count, GradScaler's scale and flag, the
clipped norm)."""
from typing import Callable, Optional, overload

import torch

from . import empty
from .. import programs
from . import _optim_compile
from ._optim_part import _Part
from ._step import DeviceScalars


class _Step(_Part):
    """Mixin of optim._Fused: step() and the launch of one unit."""

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        """Steps the parameters whose .grad is not None (those the backward
        pass has not stepped already, overlap=True): collective. Traced by
        torch.compile, one custom op that runs this same step
        (_optim_compile)."""
        if torch.compiler.is_compiling():
            _optim_compile.traced_step(self, closure)
            return None
        return self._eager_step(closure)

    def _eager_step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._begin_amp_step()
        active = self._active()
        launched = list(self._launched)
        if self._sess.nranks > 1:
            self._agree("step()", active, len(launched))
        if self._pending:
            self._gather_owed_except(launched)
        if self._sess.nranks > 1 and self._recording:
            self._order = self._rank0_order()
        self._recording = False
        if self._plan_stale(active, launched):
            self._plan(active, launched)
        done = {id(u) for u in launched}
        for u in self._units:
            if id(u) not in done:
                self._start(u) if self._overlap else self._launch(u)
        self._sync_side()
        self._launched = []
        if self._launcher is not None:
            self._launcher.reset()
        return loss

    def _launch(self, u):
        """One unit's step on the current stream (with the all-gather
        deferred: its gather owed from the last step first, and its new
        gather owed after it)."""
        if self._defer:
            self._gather(u)
        self._refresh_changed(u)
        if u.bound is None:
            self._bind(u)
        u.step += 1
        self._before(u)
        self._received(u, u.bound(**self._scalars(u)))
        u.step_t.fill_(float(u.step))
        if self._defer:
            self._owe(u)

    def _bind(self, u):
        ps = [self._params[k] for k in u.keys]
        tensors = dict(g=[self._grads[k] for k in u.keys])
        if u.keys[0] in self._masters:
            tensors["p"] = [self._masters[k] for k in u.keys]
            tensors["w"] = ps
        else:
            tensors["p"] = ps
        if self._defer:  # the step without its all-gather reads no weights, writes slices
            tensors = dict(g=self._padded(u, "g", tensors["g"]),
                           p=self._padded(u, "p", tensors["p"]))
            self._bind_gather(u, ps)
        for name in u.names:
            tensors[name] = u.state[name] if u.sliced else self._member_views(u, name, ps)
        tensors.update(self._device_inputs(u))
        u.bound = u.fn.bind(tensors, out=self._outputs(u), gscale=1.0 / self._sess.nranks)
        u.scalar_names = [s.name for s in u.fn.spec.inputs
                          if s.kind == "scalar" and s.name != "gscale"]

    def _member_views(self, u, name, ps):
        cuts = [0]
        for p in ps:
            cuts.append(cuts[-1] + p.numel())
        return [u.state[name][a:b] for a, b in zip(cuts, cuts[1:])]

    # Where the program variants that take device tensors plug in (capturable
    # lr and step count, grad_scale / found_inf, the clipped norm): the
    # tensors bound with the unit's, the outputs given to bind, what runs
    # before each call, and what reads the call's results after it.

    def _device_inputs(self, u):
        """The 0-dimensional device tensors the unit's program variant reads
        (coconet.programs.step_inputs' `device`: lr and the step count t when
        capturable, t, grad_scale and found_inf under a GradScaler), made
        once per unit (coconet.torch._step.DeviceScalars), t from the
        unit's step count."""
        names = programs.step_inputs(self.kind, u.ident.dtype, **dict(u.options))["device"]
        u.scalars = DeviceScalars(names, self._pg, u.step)
        return dict(u.scalars.tensors)

    def _outputs(self, u):
        """Tensors for the program's outputs (bind's `out`): the group's
        norm tensor for a clipped step (_norm_output), else the program's
        own."""
        if dict(u.options).get("clip"):
            return {"gnorm": self._norm_output(self.param_groups[u.gi])}
        if self._defer:
            return dict(u.slices)  # this rank's slices of the new (master) weights
        return None

    def _norm_output(self, pg):
        """The 0-dimensional tensor into which pg's steps write the norm of
        the summed, averaged gradient before clipping
        (coconet.torch.clip_grad_norm_ returns it; NaN until a step has
        clipped)."""
        gi = next(i for i, g in enumerate(self.param_groups) if g is pg)
        if gi not in self._norms:
            t = empty([], torch.float32, self._pg)
            t.fill_(float("nan"))
            self._norms[gi] = t
        return self._norms[gi]

    def _before(self, u):
        """Writes the unit's device scalars on the stream: lr, t + 1,
        GradScaler's scale (_unit_scale: a bucket started during the
        backward pass reads the GradScaler's own)."""
        u.scalars.before(self.param_groups[u.gi], self._unit_scale(u))

    def _received(self, u, result):
        """After a step: a skipped step taken back from the device's step
        count, and its found kept for coconet.torch.GradScaler: the largest
        of the step's units (those started during the backward pass
        included), in a 0-dimensional buffer of the optimizer's, written on
        the stream of the unit's launch (step() ends with the current
        stream waiting for the side stream's)."""
        u.scalars.after(result)
        if isinstance(result, dict) and "found" in result:
            f = result["found"].reshape(())
            if self._found is None:
                if self._found_buf is None:
                    self._found_buf = torch.zeros((), dtype=torch.float32,
                                                  device=self._sess.device)
                self._found = self._found_buf
                self._found.copy_(f)
            else:
                torch.maximum(self._found, f, out=self._found)

    def _sync_step(self, u):
        """The unit's host step count from the device's where its variant
        keeps one there (a skipped step does not count; a replayed CUDA
        graph counts its steps): a synchronisation."""
        if u.scalars is not None and "t" in u.scalars.tensors:
            u.step = int(u.scalars.step_count(u.step))
            u.step_t.fill_(float(u.step))

    def _scalars(self, u):
        """The Scalars the unit's program takes, by value, from its group."""
        pg = self.param_groups[u.gi]
        b1, b2 = pg["betas"]
        values = dict(lr=lambda: pg["lr"], t=lambda: u.step, beta1=lambda: b1,
                      beta2=lambda: b2, eps=lambda: pg["eps"], wd=lambda: pg["weight_decay"],
                      maxnorm=lambda: pg["max_grad_norm"])
        return {n: float(values[n]()) for n in u.scalar_names}
