"""coconet.torch.optim's deferred all-gather (overlap_param_gather=True at
P > 1): each bucket's step (coconet.programs.optimizer_rs) leaves its
updated slice in a buffer, and its gather (coconet.programs.param_gather)
fills every rank's parameters later: before the first module of the next
forward pass that holds one of its parameters (a global forward pre-hook),
before the bucket's next step, or at gather_params(). Until then the
parameters keep their values of before the step."""
import weakref
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from . import CocoError
from ._optim_part import _Part

# the optimizers with gathers to defer
_DEFERRING: "weakref.WeakSet[Any]" = weakref.WeakSet()
_HOOK = [None]  # the global forward pre-hook's handle, while one is registered


def _forward_pre_hook(module, args):
    """Before any module's forward: the gathers owed for its own parameters."""
    if not _DEFERRING:
        _HOOK[0].remove()
        _HOOK[0] = None
        return
    for opt in list(_DEFERRING):
        if opt._pending:
            opt._gather_for(module)


def _register(opt):
    _DEFERRING.add(opt)
    if _HOOK[0] is None:
        _HOOK[0] = register_module_forward_pre_hook(_forward_pre_hook)


def _refuse_read(ref, what):
    """A module's state_dict / load_state_dict pre-hook: refused while the
    optimizer owes gathers (this rank alone cannot gather: the others
    would not join the collective)."""
    def hook(module, *args):
        opt = ref()
        if opt is not None and opt._pending:
            raise CocoError(
                "coconet.torch.optim: %s of %s while the optimizer's all-gathers of the last "
                "step are deferred (overlap_param_gather=True): its parameters are not updated "
                "yet; call opt.gather_params() on every rank first" % (what, type(module).__name__))
    return hook


class _Gathers(_Part):
    """Mixin of optim._Fused: the gathers owed after the steps of the
    buckets (self._pending, in launch order, the same on every rank)."""

    def _init_gathers(self, on):
        self._defer = bool(on) and self._sess.nranks > 1
        self._pending = []
        self._unit_of = {}  # parameter key -> its unit, while deferring
        self._seen = weakref.WeakSet()  # the modules given the read hooks
        if self._defer:
            _register(self)

    def gather_params(self) -> None:
        """Finishes every deferred all-gather (overlap_param_gather=True):
        the parameters hold the last step's values after it (the current
        stream waits for them). Collective at P > 1 while gathers are
        owed; nothing to do otherwise. step(), the optimizer's
        checkpoint calls, add_param_group and refresh_masters call it."""
        if self._pending:
            with torch.cuda.stream(self._side):
                for u in list(self._pending):
                    self._gather(u)
        self._sync_side()

    def _gather_owed_except(self, launched):
        """Before step() plans: the gathers owed by units not stepped in
        this backward pass (their parameters were not used by a forward)."""
        ids = {id(u) for u in launched}
        owed = [u for u in self._pending if id(u) not in ids]
        if owed:
            with torch.cuda.stream(self._side):
                for u in owed:
                    self._gather(u)

    def _gather(self, u):
        """Unit u's gather, on the stream in use, where it is owed."""
        if any(x is u for x in self._pending):
            self._pending = [x for x in self._pending if x is not u]
            u.gathered()

    def _owe(self, u):
        self._pending.append(u)

    def _gather_for(self, module):
        """The forward pre-hook's work: the owed gathers of the units that
        hold one of the module's own parameters, on the side stream, the
        current stream waiting for them; then the next owed unit in the
        reverse of the backward's order (the forward's) started ahead."""
        if module not in self._seen:
            self._watch(module)
        units = []
        for p in module._parameters.values():
            u = self._unit_of.get(self._where.get(id(p))) if p is not None else None
            if u is not None and any(x is u for x in self._pending) and \
                    not any(x is u for x in units):
                units.append(u)
        if not units:
            return
        with torch.cuda.stream(self._side):
            for u in units:
                self._gather(u)
        self._sync_side()
        ahead = [u for u in reversed(self._units) if any(x is u for x in self._pending)]
        if ahead:
            with torch.cuda.stream(self._side):
                self._gather(ahead[0])

    def _watch(self, module):
        """A module that holds parameters of this optimizer: its state_dict
        and load_state_dict refused while gathers are owed."""
        self._seen.add(module)
        if any(p is not None and id(p) in self._where for p in module._parameters.values()):
            module.register_state_dict_pre_hook(_refuse_read(self._ref, "state_dict()"))
            module.register_load_state_dict_pre_hook(_refuse_read(self._ref,
                                                                  "load_state_dict()"))

    # ---- the unit's buffers and its gather's binding ----

    def _make_gather(self, u, path, compile_, pad):
        """The unit's gather program, its slice outputs (c elements a rank)
        and the padding members (slice_layout's pad elements) of its
        gradients, (master) parameters and 16-bit weights."""
        u.gather_fn = compile_(path, schedule="program", group=self._pg)
        c = u.sizes[self._sess.rank]
        dtype = self._params[u.keys[0]].dtype
        mixed = u.keys[0] in self._masters
        u.slices = {"p_": self._slice_buffer(u, c, torch.float32)}
        if mixed:
            u.slices["w_"] = self._slice_buffer(u, c, dtype)
        u.pads = {}
        if pad:
            u.pads = {"g": self._slice_buffer(u, pad, dtype), "p": self._slice_buffer(
                u, pad, torch.float32)}
            u.pads["g"].zero_()
            if mixed:
                u.pads["w"] = self._slice_buffer(u, pad, dtype)

    def _slice_buffer(self, u, n, dtype):
        buf = self._buffer(n, dtype)
        u.bufs.append(buf)
        return buf[:n]

    def _padded(self, u, name, tensors):
        pad = u.pads.get(name)
        return list(tensors) + ([pad] if pad is not None else [])

    def _bind_gather(self, u, ps):
        """The gather bound to the unit's slices and (master) parameters."""
        masters = [self._masters[k] for k in u.keys] if u.keys[0] in self._masters else None
        tensors = dict(ps=u.slices["p_"], p=self._padded(u, "p", masters or ps))
        if masters is not None:
            tensors.update(ws=u.slices["w_"], w=self._padded(u, "w", ps))
        u.gathered = u.gather_fn.bind(tensors)
