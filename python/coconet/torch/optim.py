"""coconet.torch.optim: data-parallel Adam (AdamW's decoupled weight decay)
and LAMB as torch.optim.Optimizers, each step one fused RS-Opt-AG (the
paper's fuse(RS-Opt-AG), coconet.programs.optimizer): the gradients are
summed over the ranks and averaged (as DDP does), each rank updates its
slice of the parameters with its slice of the optimizer state, and the
updated slices are gathered into every rank's parameters, in one
FusedAllReduce. It replaces DDP's gradient AllReduce and the optimizer:
wrap the model in nothing, call backward, then step.

Where things lie. At construction the parameters of each group are moved
into one flat buffer of the arena (coconet.torch.empty; param.data becomes
a view of it, copied once) and each param.grad is made a view of a second
flat buffer, so autograd accumulates the gradients there and the program
takes both as scattered tensors, member by member, with no flattening copy
and the one-kernel fused collective (the arena is a symmetric NCCL window).
zero_grad zeroes that buffer in place (set_to_none is ignored: a gradient
set to None would come back outside the arena); a gradient found elsewhere
at step time (model.zero_grad() sets them to None) is copied in, with a
warning once. Each rank keeps only its slice of m and v (1/P of the state);
state_dict gathers them (a collective: every rank calls it) into
torch.optim.AdamW's per-parameter layout (exp_avg, exp_avg_sq, step), and
load_state_dict takes this rank's slice back. An optimizer that opens its
group's session (the first coconet.torch use of that group) makes the arena
as large as its buffers need (_arena_need), not the 4 GiB default, so the
model keeps the rest; COCONET_ARENA_BYTES, or coconet.torch.session(group,
arena_bytes) called first, decides instead.

Precision: FP32 parameters are updated in place. FP16 or BF16 parameters
(and so gradients) get FP32 master weights, kept by the optimizer
(replicated: 4 bytes per parameter on every rank), from which the program
writes the rounded model weights in the same kernel.

Clipping, GradScaler and capturable steps (the step's program variant:
coconet.programs.step_variant, from the group's max_grad_norm, amsgrad,
maximize and capturable and whether a GradScaler scales the step; a step
that needs another variant than the last builds it, a collective):
coconet.torch.clip_grad_norm_ (or a group's max_grad_norm) clips by the
norm of the summed, averaged gradient inside the step and returns that norm
as a tensor written by the step; under a GradScaler (coconet.torch.GradScaler
at P > 1, so that the ranks' scales agree) the step unscales, checks the
summed gradient for Inf and NaN and skips on every rank together;
capturable=True reads lr and the step count from device memory
(coconet.torch._step).

Constraints: the parameters of a group must share one element type and lie
on this rank's GPU; each group is its own program (built once: nvcc takes
minutes for a first build of a model, then the cache serves it)."""
import os
import warnings
import weakref

import torch
import torch.distributed as dist

from . import CocoError, TYPE_NAMES, _cache_dir, compile as _compile, empty, is_open, session
from .. import programs
from ._step import DeviceScalars

_LIVE = weakref.WeakSet()  # the fused optimizers, for clip_grad_norm_ (_owner)

_ALIGN = 16  # bytes: each member's offset in the flat buffers
_SLACK = 64 << 20  # bytes: the programs' workspaces (reduction partials) and alignment


def _arena_need(param_groups, group):
    """The arena bytes this optimizer's buffers take: per group the flat
    parameters and gradients, a staging buffer as large as the gradients
    (the push algorithm's), FP32 master weights for 16-bit parameters and
    this rank's slices of m and v (and vm with amsgrad); and some slack."""
    nranks = dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1
    need = _SLACK
    for pg in param_groups:
        ps = [p for p in pg["params"] if p.requires_grad]
        if not ps:
            continue
        total = _layout(ps)[1]
        states = 3 if pg.get("amsgrad") else 2  # m and v, and amsgrad's vm
        need += 3 * total * ps[0].element_size() + states * 4 * (-(-total // nranks)) + 512 * 4
        if ps[0].dtype != torch.float32:
            need += 4 * total
    return need


def _layout(params):
    """Element offsets of each parameter in a flat buffer (16-byte aligned)."""
    offs, at = [], 0
    for p in params:
        per = max(1, _ALIGN // p.element_size())
        at = (at + per - 1) // per * per
        offs.append(at)
        at += p.numel()
    return offs, at


class _Group:
    """One parameter group's program, buffers and state."""


def _owner(params):
    """(optimizer, param group) of the fused optimizer whose one group
    holds every parameter of params, or None when none holds any of them;
    refused when they are spread over several groups."""
    ids = {id(p) for p in params}
    hits = [(o, pg) for o in list(_LIVE) for pg in o.param_groups
            if ids & {id(p) for p in pg["params"]}]
    if not hits:
        return None
    if len(hits) > 1 or not ids <= {id(p) for p in hits[0][1]["params"]}:
        raise CocoError("coconet.torch.clip_grad_norm_: the parameters lie in %d parameter "
                        "groups%s; the fused step clips each group by its own norm, so give "
                        "the parameters of one group (or clip each group apart)"
                        % (len(hits), "" if hits else " and outside them"))
    return hits[0]


class _Fused(torch.optim.Optimizer):
    kind = None
    decay = "decoupled"  # AdamW's formula; "l2": torch.optim.Adam's
    _step_supports_amp_scaling = True  # GradScaler gives grad_scale and found_inf to step

    def __init__(self, params, lr, betas, eps, weight_decay, group, schedule):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError("coconet.torch.optim.%s: lr, eps and weight_decay must be >= 0 "
                             "and betas in [0, 1): given lr=%r betas=%r eps=%r weight_decay=%r"
                             % (type(self).__name__, lr, betas, eps, weight_decay))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))
        self._pg = group
        if not is_open(group) and not os.environ.get("COCONET_ARENA_BYTES"):
            # the optimizer opens the session: an arena of what it needs, not
            # the 4 GiB default (the rest is the model's: larger micro-batches)
            self._sess = session(group, arena_bytes=_arena_need(self.param_groups, group))
        else:
            self._sess = session(group)
        self._schedule = schedule
        self._warned = False
        self._coco = [self._prepare(pg) for pg in self.param_groups]
        _LIVE.add(self)

    # ---- construction ----

    def _check(self, params):
        dev = self._sess.device
        for i, p in enumerate(params):
            if p.device != dev:
                raise CocoError("coconet.torch.optim: parameter %d (shape %s) is on %s; "
                                "expected this rank's GPU %s" % (i, list(p.shape), p.device, dev))
            if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise CocoError("coconet.torch.optim: parameter %d (shape %s) is %s; expected "
                                "float32, float16 or bfloat16" % (i, list(p.shape), p.dtype))
            if p.dtype != params[0].dtype:
                raise CocoError("coconet.torch.optim: parameter %d is %s but parameter 0 is %s: "
                                "a group's parameters must share one type (put the others in "
                                "a parameter group of their own)" % (i, p.dtype, params[0].dtype))

    def _prepare(self, pg):
        st = _Group()
        st.params = [p for p in pg["params"] if p.requires_grad]
        if not st.params:
            st.fn = None
            return st
        self._check(st.params)
        dtype = st.params[0].dtype
        st.dtype = TYPE_NAMES[dtype]
        st.variant = programs.step_variant(self.kind, pg, self.decay)
        st.fn = self._compile_variant(st, st.variant)
        offs, total = _layout(st.params)
        st.flat_p = empty([total], dtype, self._pg)
        st.flat_g = empty([total], dtype, self._pg)
        st.flat_g.zero_()
        st.grads = []
        with torch.no_grad():
            for p, o in zip(st.params, offs):
                view = st.flat_p[o:o + p.numel()].view(p.shape)
                view.copy_(p.data)
                p.data = view
                g = st.flat_g[o:o + p.numel()].view(p.shape)
                if p.grad is not None:
                    g.copy_(p.grad)
                p.grad = g
                st.grads.append(g)
        st.master = None
        if st.dtype != "FP32":
            st.flat_master = empty([total], torch.float32, self._pg)
            st.master = [st.flat_master[o:o + p.numel()] for p, o in zip(st.params, offs)]
            for p, m in zip(st.params, st.master):
                m.copy_(p.data.reshape(-1))
        # m and v: this rank's slice (the paper's schedule: asSlice), or under
        # a schedule that keeps them whole, one flat buffer given member by member
        spec = st.fn.spec
        st.sliced = spec.input("m").kind == "tensor"
        st.m = empty(spec.input("m").shape, torch.float32, self._pg)
        st.v = empty(spec.input("v").shape, torch.float32, self._pg)
        st.m.zero_()
        st.v.zero_()
        if st.sliced:
            st.m_arg, st.v_arg = st.m, st.v
        else:
            cuts = [0]
            for c in spec.input("m").members:
                cuts.append(cuts[-1] + c)
            st.m_arg = [st.m[a:b] for a, b in zip(cuts, cuts[1:])]
            st.v_arg = [st.v[a:b] for a, b in zip(cuts, cuts[1:])]
        st.t = 0
        st.bound = None  # st.fn bound to these tensors at the first step
        st.vm = st.vm_arg = st.norm = st.scalars = None
        return st

    def _compile_variant(self, st, variant):
        """The group's program for a step variant (programs.step_variant),
        built or found in the cache; collective."""
        text = programs.optimizer(self.kind, [p.numel() for p in st.params], st.dtype, **variant)
        path = programs.write(text, self.kind, os.path.join(_cache_dir(), "torch-programs"))
        return _compile(path, schedule=self._schedule, group=self._pg)

    def _norm_output(self, pg):
        """The 0-dim tensor into which pg's steps write the clipped
        gradient's norm (coconet.torch.clip_grad_norm_ returns it; NaN
        until a step has clipped)."""
        st = next(s for g, s in zip(self.param_groups, self._coco) if g is pg)
        if st.norm is None:
            st.norm = empty([], torch.float32, self._pg)
            st.norm.fill_(float("nan"))
        return st.norm

    def _alloc_vm(self, st):
        """amsgrad's max of v (zeros, once), laid out as v: this rank's
        slice, or under a schedule that keeps it whole its members."""
        if st.vm is not None:
            return
        st.vm = empty(st.v.shape, torch.float32, self._pg)
        st.vm.zero_()
        at = [a.storage_offset() - st.v.storage_offset() for a in st.v_arg] \
            if not st.sliced else None
        st.vm_arg = st.vm if st.sliced else [st.vm[o:o + a.numel()]
                                             for o, a in zip(at, st.v_arg)]

    def _bind(self, st, pg):
        """st.fn bound to the group's tensors and its device scalars."""
        io = programs.step_inputs(self.kind, st.dtype, **st.variant)
        if "vm" in io["state"]:
            self._alloc_vm(st)
        st.scalars = DeviceScalars(io["device"], self._pg, st.t)
        tensors = dict(g=st.grads, m=st.m_arg, v=st.v_arg, **st.scalars.tensors)
        if "vm" in io["state"]:
            tensors["vm"] = st.vm_arg
        if st.master is None:
            tensors["p"] = st.params
        else:
            tensors["p"], tensors["w"] = st.master, st.params
        out = {"gnorm": self._norm_output(pg)} if "gnorm" in io["outputs"] else None
        extra = dict(gscale=1.0 / self._sess.nranks)
        if "maxnorm" in io["scalars"]:
            extra["maxnorm"] = 1.0
        st.bound = st.fn.bind(tensors, out=out, **extra)
        st.io = io

    def _step_group(self, pg, st):
        """One group's step: its variant (built again when the group's
        settings or a GradScaler ask for another), its device scalars, the
        call, the step count."""
        scale, found = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        variant = programs.step_variant(self.kind, pg, self.decay,
                                        amp=scale is not None or found is not None)
        if variant != st.variant:
            if st.scalars is not None:  # the device's count of steps taken
                st.t = int(st.scalars.step_count(st.t))
            st.variant, st.fn, st.bound = variant, self._compile_variant(st, variant), None
        if st.bound is None:
            self._bind(st, pg)
        st.t += 1
        st.scalars.before(pg, scale, found)
        b1, b2 = pg["betas"]
        values = dict(lr=lambda: pg["lr"], t=lambda: st.t, beta1=lambda: b1, beta2=lambda: b2,
                      eps=lambda: pg["eps"], wd=lambda: pg["weight_decay"],
                      maxnorm=lambda: pg["max_grad_norm"])
        res = st.bound(**{k: float(values[k]()) for k in st.io["scalars"] if k != "gscale"})
        st.scalars.after(res)
        if isinstance(res, dict) and "found" in res:  # coconet.torch.GradScaler reads it
            self._found = res["found"] if self._found is None else \
                torch.maximum(self._found, res["found"])
        return res

    # ---- the step ----

    def zero_grad(self, set_to_none=True):
        """Zeroes the gradients in place (set_to_none is ignored: see the
        module's documentation)."""
        for st in self._coco:
            if st.fn is not None:
                st.flat_g.zero_()
                for p, g in zip(st.params, st.grads):
                    if p.grad is None or p.grad.data_ptr() != g.data_ptr():
                        p.grad = g

    def _gather_grads(self, st):
        # the usual step: every .grad is still the arena tensor it was given
        # (backward accumulates into it in place); one identity test each
        if all(p.grad is g for p, g in zip(st.params, st.grads)):
            return
        for p, g in zip(st.params, st.grads):
            if p.grad is not None and p.grad.data_ptr() == g.data_ptr():
                continue
            if not self._warned:
                self._warned = True
                warnings.warn("coconet.torch.optim: a gradient lies outside the arena (set to "
                              "None, e.g. by model.zero_grad()): copied in; call the "
                              "optimizer's zero_grad() instead, which zeroes them in place")
            if p.grad is None:
                g.zero_()
            else:
                g.copy_(p.grad)
            p.grad = g

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._found = None
        for pg, st in zip(self.param_groups, self._coco):
            if st.fn is None:
                continue
            self._gather_grads(st)
            self._step_group(pg, st)
        return loss

    # ---- the state, gathered and scattered ----

    def _slices(self, st, name):
        """(offset, count) of each rank's slice of state tensor `name` (the
        whole of it on each rank when it is not sliced)."""
        if not st.sliced:
            return [(0, st.m.numel())] * self._sess.nranks
        prog = st.fn.spec._prog
        out, at = [], 0
        for r in range(self._sess.nranks):
            n = 1
            for d in prog.tensor_info(name, r).local_shape:
                n *= d
            out.append((at, n))
            at += n
        return out

    def _gather(self, st, t, name):
        sl = self._slices(st, name)
        if self._sess.nranks == 1 or not st.sliced:
            return t.reshape(-1).clone()
        most = max(n for _, n in sl)
        mine = torch.zeros(most, dtype=t.dtype, device=t.device)
        mine[:t.numel()].copy_(t.reshape(-1))
        allp = torch.empty(most * len(sl), dtype=t.dtype, device=t.device)
        dist.all_gather_into_tensor(allp, mine, group=self._pg)
        return torch.cat([allp[r * most:r * most + n] for r, (_, n) in enumerate(sl)])

    def _param_index(self):
        """Each trained parameter's index in state_dict's numbering."""
        index, k = {}, 0
        for pg in self.param_groups:
            for p in pg["params"]:
                index[id(p)] = k
                k += 1
        return index

    def state_dict(self):
        """torch.optim.AdamW's layout: per parameter exp_avg, exp_avg_sq
        (gathered from every rank's slice: collective) and step; with
        amsgrad max_exp_avg_sq; with FP16 or BF16 parameters also
        master_param (FP32)."""
        sd = super().state_dict()
        index = self._param_index()
        for st in self._coco:
            if st.fn is None:
                continue
            m, v = self._gather(st, st.m, "m"), self._gather(st, st.v, "v")
            vm = self._gather(st, st.vm, "v") if st.vm is not None else None  # laid out as v
            at = 0
            for i, p in enumerate(st.params):
                n = p.numel()
                entry = {"step": torch.tensor(st.scalars.step_count(st.t) if st.scalars
                                              else float(st.t)),
                         "exp_avg": m[at:at + n].view(p.shape).clone(),
                         "exp_avg_sq": v[at:at + n].view(p.shape).clone()}
                if vm is not None:
                    entry["max_exp_avg_sq"] = vm[at:at + n].view(p.shape).clone()
                if st.master is not None:
                    entry["master_param"] = st.master[i].view(p.shape).clone()
                sd["state"][index[id(p)]] = entry
                at += n
        return sd

    def load_state_dict(self, state_dict):
        """Takes the groups' settings and this rank's slice of each state
        tensor (see state_dict); the tensors are read in FP32, never cast to
        the parameters' type."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise CocoError("coconet.torch.optim: the state dict has %d parameter groups, this "
                            "optimizer %d" % (len(saved), len(self.param_groups)))
        for pg, sg in zip(self.param_groups, saved):
            if len(sg["params"]) != len(pg["params"]):
                raise CocoError("coconet.torch.optim: a group of the state dict has %d "
                                "parameters, this optimizer's %d"
                                % (len(sg["params"]), len(pg["params"])))
            for k, v in sg.items():
                if k != "params":
                    pg[k] = v
        state = state_dict["state"]
        for pg, sg, st in zip(self.param_groups, saved, self._coco):
            if st.fn is None:
                continue
            where = {id(p): k for p, k in zip(pg["params"], sg["params"])}
            got = [state.get(where[id(p)], {}) for p in st.params]
            if any("exp_avg" not in s or "exp_avg_sq" not in s for s in got):
                raise CocoError("coconet.torch.optim: the state dict lacks exp_avg or "
                                "exp_avg_sq for some parameters of a group")
            rank = self._sess.rank
            with torch.no_grad():
                keys = [("exp_avg", st.m, "m"), ("exp_avg_sq", st.v, "v")]
                if all("max_exp_avg_sq" in s for s in got):  # amsgrad's, laid out as v
                    self._alloc_vm(st)
                    keys.append(("max_exp_avg_sq", st.vm, "v"))
                for key, mine, name in keys:
                    full = torch.cat([s[key].reshape(-1).to(mine.device, torch.float32)
                                      for s in got])
                    off, n = self._slices(st, name)[rank]
                    mine.reshape(-1).copy_(full[off:off + n])
                st.t = int(float(got[0].get("step", 0)))
                if st.scalars is not None and "t" in st.scalars.tensors:
                    st.scalars.tensors["t"].fill_(float(st.t))
                if st.master is not None:
                    for m, s, p in zip(st.master, got, st.params):
                        m.copy_(s["master_param"].reshape(-1) if "master_param" in s
                                else p.data.reshape(-1).float())


class Adam(_Fused):
    """Data-parallel Adam with decoupled weight decay (torch.optim.AdamW's
    formula), one fused RS-Opt-AG a step; see the module's documentation."""
    kind = "adam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 group=None, schedule="paper"):
        super().__init__(params, lr, betas, eps, weight_decay, group, schedule)


AdamW = Adam


class LAMB(_Fused):
    """Data-parallel LAMB: Adam's moments, u = m^/(sqrt(v^) + eps) + wd p,
    p -= lr ratio u with the trust ratio ||p|| / ||u|| (1 where either
    norm is 0) of each parameter tensor, as the LAMB paper and apex's
    FusedLAMB define it; a parameter group with "trust": "group" takes one
    ratio over all its parameters instead (examples/lamb.coco, the CoCoNet
    paper's program)."""
    kind = "lamb"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 group=None, schedule="paper"):
        super().__init__(params, lr, betas, eps, weight_decay, group, schedule)
