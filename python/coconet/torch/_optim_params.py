"""coconet.torch.optim's base class: construction, the parameters moved
into the arena (flat buffers, gradient views, FP32 masters), zero_grad,
the masters' refresh and the ranks' agreement before collective calls;
also the arena's size, the CPU group and clip_grad_norm_'s lookup
(_owner). See optim.py's documentation."""
import datetime
import os
import weakref
from typing import Any, Dict, Iterable, Optional

import torch
import torch.distributed as dist

from . import CocoError, empty, is_open, ops, session
from .. import optplan
from ._optim_buckets import _hook
from ._optim_part import _Part


_SLACK = 64 << 20  # bytes: the programs' workspaces (reduction partials) and alignment
_PER_UNIT = 1 << 20  # bytes: each further program's own workspace
_TIMEOUT = float(os.environ.get("COCONET_OPTIM_TIMEOUT", "60"))
_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the fused optimizers, for clip_grad_norm_ (_owner)


def _nranks(group):
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def _arena_need(param_groups, group, units=1, deferred=False):
    """The arena bytes this optimizer's buffers take: the flat parameters
    and gradients, a staging buffer as large as the gradients (the push
    algorithm's), FP32 master weights for 16-bit parameters and this rank's
    slices of m, v and amsgrad's vm (deferred: also of the new parameters
    and weights); and some slack, more with more units (buckets)."""
    nranks = _nranks(group)
    need = _SLACK + _PER_UNIT * max(0, units - 1)
    for pg in param_groups:
        for dtype in {p.dtype for p in pg["params"]}:
            ps = [p for p in pg["params"] if p.requires_grad and p.dtype == dtype]
            if not ps:
                continue
            total = optplan.layout([p.numel() for p in ps], ps[0].element_size())[1]
            need += 3 * total * ps[0].element_size() + 3 * 4 * (-(-total // nranks)) + 4096
            if deferred:
                need += (4 + ps[0].element_size()) * (-(-total // nranks)) + 4096
            if dtype != torch.float32:
                need += 4 * total
    return need



_CPU_GROUPS: Dict[Optional[int], Any] = {}  # id of a process group (None: the default) -> its gloo group


def _cpu_group(group):
    """A gloo group over the ranks of `group`, for the ranks' agreements
    (host values, no GPU synchronisation), made by the first optimizer over
    that group and shared by the later ones; None where it cannot be made."""
    key = id(group) if group is not None else None
    if key not in _CPU_GROUPS:
        try:
            _CPU_GROUPS[key] = dist.new_group(backend="gloo") if group is None else \
                dist.new_group(ranks=dist.get_process_group_ranks(group), backend="gloo",
                               use_local_synchronization=True)
        except Exception:  # noqa: BLE001 - the agreement then runs on the group itself
            _CPU_GROUPS[key] = None
    return _CPU_GROUPS[key]



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
                        % (len(hits), "" if len(hits) > 1 else " and outside them"))
    return hits[0]



def _check_defaults(name, d):
    """torch's checks of the hyperparameters, with its messages' content."""
    lr, (b1, b2), eps, wd = d["lr"], d["betas"], d["eps"], d["weight_decay"]
    if not 0.0 <= float(lr):
        raise ValueError("Invalid learning rate: %r" % (lr,))
    if not 0.0 <= eps:
        raise ValueError("Invalid epsilon value: %r" % (eps,))
    if not 0.0 <= float(b1) < 1.0:
        raise ValueError("Invalid beta parameter at index 0: %r" % (b1,))
    if not 0.0 <= float(b2) < 1.0:
        raise ValueError("Invalid beta parameter at index 1: %r" % (b2,))
    if not 0.0 <= wd:
        raise ValueError("Invalid weight_decay value: %r" % (wd,))
    if d.get("differentiable"):
        raise CocoError("coconet.torch.optim.%s: differentiable=True is refused: the fused step "
                        "runs outside autograd" % name)


class _Params(torch.optim.Optimizer, _Part):
    """The fused optimizer's parameters and books; the other concerns are
    mixins (optim._Fused)."""
    kind: Optional[str] = None
    _step_supports_amp_scaling = True  # GradScaler gives grad_scale and found_inf to step

    def __init__(self, params: Iterable[Any], defaults: Dict[str, Any], group: Any = None,
                 schedule: str = "paper", overlap: bool = False,
                 bucket_mb: Optional[float] = 25, overlap_param_gather: bool = False,
                 broadcast: bool = True) -> None:
        _check_defaults(type(self).__name__, defaults)
        if overlap_param_gather and not overlap:
            raise CocoError("coconet.torch.optim: overlap_param_gather=True defers the "
                            "all-gather of the buckets stepped during the backward pass: it "
                            "needs overlap=True")
        if bucket_mb is not None and bucket_mb <= 0:
            raise ValueError("bucket_mb must be > 0 (or None: one bucket per group)")
        super().__init__(params, defaults)
        self._pg = group
        self._schedule = schedule
        self._overlap = bool(overlap)
        self._gather_later = bool(overlap_param_gather)
        cap = None if bucket_mb is None or self.kind == "lamb" else int(bucket_mb * (1 << 20))
        self._cap = cap if self._overlap else None
        self._open_session()
        self._cpu = _cpu_group(group) if self._sess.nranks > 1 else None
        self._broadcast = broadcast
        self._init_books()
        self._init_gathers(self._gather_later)
        for gi in range(len(self.param_groups)):
            self._adopt(gi)
        _LIVE.add(self)

    def _init_books(self):
        """The optimizer's own records (what each is: where it is used)."""
        self._params, self._where, self._groups_of = [], {}, []
        self._grads, self._masters, self._versions = {}, {}, {}
        self._hooks, self._units, self._parked = {}, [], {}
        self._order, self._recording = [], True
        self._launcher, self._launched, self._no_sync = None, [], False
        self._side = torch.cuda.Stream(self._sess.device) if self._overlap else None
        self._pool, self._consolidated, self._flats = [], None, []
        self._flat_params = []  # each of _flats' parameters' flat buffer, in its order
        self._norms, self._found = {}, None  # per group the clipped norm; the step's found
        self._found_buf = None  # the device buffer _found is (made at the first scaled step)
        # the coconet.torch.GradScaler now stepping, and (a weak reference) the last
        # one: the buckets of the overlapped mode read its scale
        self._stepping_scaler, self._scaler = None, None
        self._ref = weakref.ref(self)
        self._step_key = ops.register(self)  # coconet::optimizer_step's (_optim_compile)

    def _open_session(self):
        if not is_open(self._pg) and not os.environ.get("COCONET_ARENA_BYTES"):
            # the optimizer opens the session: an arena of what it needs, not
            # the 4 GiB default (the rest is the model's: larger micro-batches)
            nbytes = sum(p.numel() * p.element_size() for pg in self.param_groups
                         for p in pg["params"] if p.requires_grad)
            units = nbytes // self._cap + 2 * len(self.param_groups) if self._cap else 1
            self._sess = session(self._pg, arena_bytes=_arena_need(
                self.param_groups, self._pg, units, self._overlap and self._gather_later))
        else:
            self._sess = session(self._pg)

    # ---- parameters: groups, the arena, hooks ----

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """torch's add_param_group; the new group's parameters move into the
        arena, and its programs are built at its first step. Collective."""
        super().add_param_group(param_group)
        if hasattr(self, "_params"):  # not during torch's __init__
            self._sync_side()
            if self._sess.nranks > 1:
                self._agree("add_param_group()")
            self.gather_params()
            self._adopt(len(self.param_groups) - 1)

    def _adopt(self, gi):
        """Numbers group gi's parameters (state_dict's keys), checks them and
        their group's settings, moves the trained ones into the arena and
        broadcasts them from rank 0."""
        pg = self.param_groups[gi]
        self._options(pg, check=True)  # refuses what the programs cannot do, at construction
        keys = []
        for p in pg["params"]:
            self._where[id(p)] = len(self._params)
            keys.append(len(self._params))
            self._params.append(p)
            self._groups_of.append(gi)
        self._check([self._params[k] for k in keys])
        self._to_arena([k for k in keys if self._params[k].requires_grad])
        if self._broadcast and self._sess.nranks > 1:
            self._broadcast_params(keys)

    def _check(self, params):
        dev = self._sess.device
        for p in params:
            k = self._where[id(p)]
            if p.device != dev:
                raise CocoError("coconet.torch.optim: parameter %d (shape %s) is on %s; "
                                "expected this rank's GPU %s" % (k, list(p.shape), p.device, dev))
            if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise CocoError("coconet.torch.optim: parameter %d (shape %s) is %s; expected "
                                "float32, float16 or bfloat16" % (k, list(p.shape), p.dtype))

    def _to_arena(self, keys):
        """Moves these parameters (not yet there) into new flat buffers of the
        arena, one per type, their gradients into a second; FP32 masters for
        16-bit ones. Collective (arena allocations)."""
        keys = [k for k in keys if k not in self._grads]
        for dtype in sorted({self._params[k].dtype for k in keys}, key=str):
            ks = [k for k in keys if self._params[k].dtype == dtype]
            ps = [self._params[k] for k in ks]
            offs, total = optplan.layout([p.numel() for p in ps], ps[0].element_size())
            flat_p, flat_g = empty([total], dtype, self._pg), empty([total], dtype, self._pg)
            flat_g.zero_()
            self._flats.append((flat_g, ks))
            self._flat_params.append(flat_p)
            master = empty([total], torch.float32, self._pg) if dtype != torch.float32 else None
            with torch.no_grad():
                for k, p, o in zip(ks, ps, offs):
                    self._place(k, p, flat_p[o:o + p.numel()], flat_g[o:o + p.numel()],
                                None if master is None else master[o:o + p.numel()])

    def _place(self, k, p, pview, gview, mview):
        pview = pview.view(p.shape)
        pview.copy_(p.data)
        p.data = pview
        g = gview.view(p.shape)
        if p.grad is not None:
            g.copy_(p.grad)
            p.grad = g
        self._grads[k] = g
        if mview is not None:
            mview.copy_(p.data.reshape(-1))
            self._masters[k] = mview
            self._versions[k] = p._version
        p._coconet_optimizer = self._ref  # the latest optimizer of p owns its gradient
        if k not in self._hooks and p.requires_grad:
            self._hooks[k] = p.register_post_accumulate_grad_hook(_hook(self._ref, k))

    def _broadcast_params(self, keys):
        src = dist.get_global_rank(self._pg, 0) if self._pg is not None else 0
        with torch.no_grad():
            for k in keys:
                dist.broadcast(self._params[k].data, src=src, group=self._pg)
                if k in self._masters:
                    self._masters[k].copy_(self._params[k].data.reshape(-1))
                    self._versions[k] = self._params[k]._version

    # ---- gradients ----

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As torch: set_to_none=True sets each .grad to None (the next
        backward's gradient is copied into the arena); False zeroes the
        gradients that are not None, in place in the arena (no copy: the
        faster choice), one flat buffer at a time where it can."""
        self._sync_side()
        if set_to_none:
            for p in self._params:
                p.grad = None
            return
        whole = set()
        for flat, keys in self._flats:
            if all(self._params[k].grad is self._grads[k] for k in keys):
                flat.zero_()
                whole.update(keys)
        with torch.no_grad():
            for k, p in enumerate(self._params):
                if k in whole or p.grad is None:
                    continue
                g = self._grads.get(k)
                if g is None:
                    p.grad.detach_().zero_() if p.grad.grad_fn is not None else p.grad.zero_()
                else:
                    g.zero_()
                    p.grad = g

    def _active(self):
        """The keys whose .grad is not None, their gradients in the arena."""
        out = []
        for k, p in enumerate(self._params):
            if p.grad is None:
                continue
            out.append(k)
            g = self._grads.get(k)
            if g is not None and p.grad is not g:
                self._on_grad_copy(k, p, g)
        return out

    def _on_grad_copy(self, k, p, g):
        with torch.no_grad():
            if p.grad.data_ptr() != g.data_ptr():
                g.copy_(p.grad)
            p.grad = g

    # ---- the ranks' agreement ----

    def _describe(self, k):
        p = self._params[k]
        return "parameter %d (group %d, shape %s)" % (k, self._groups_of[k], list(p.shape))

    def _agree(self, op, active=(), launched=0, timeout=False):
        """Every rank in the same call, with the same parameters having a
        gradient and the same buckets started; refused, named, otherwise."""
        keys = range(len(self._params))
        row = optplan.agreement(op, launched, keys, set(active))
        rows = self._all_gather_ints(row, op, timeout)
        optplan.check_agreement(rows, list(keys), self._describe)

    def _all_gather_ints(self, row, op, timeout):
        n = self._sess.nranks
        if self._cpu is None:
            t = torch.tensor(row, dtype=torch.int64, device=self._sess.device)
            out = torch.empty(n * len(row), dtype=torch.int64, device=self._sess.device)
            dist.all_gather_into_tensor(out, t, group=self._pg)
            return out.view(n, -1).tolist()
        t = torch.tensor(row, dtype=torch.int64)
        out = [torch.empty_like(t) for _ in range(n)]
        work = dist.all_gather(out, t, group=self._cpu, async_op=True)
        try:
            if timeout:
                work.wait(timeout=datetime.timedelta(seconds=_TIMEOUT))
            else:
                work.wait()
        except RuntimeError as e:
            raise CocoError("coconet.torch.optim: %s is collective, but not every rank of the "
                            "group called it within %g s (COCONET_OPTIM_TIMEOUT): call it on "
                            "every rank (for a checkpoint: state_dict() on every rank, then "
                            "save on one; or consolidate_state_dict(to=0) on every rank, then "
                            "state_dict() on rank 0 alone) [%s]" % (op, _TIMEOUT, e)) from None
        return [x.tolist() for x in out]

    # ---- FP32 masters ----

    def _refresh_changed(self, u):
        """Masters of members whose 16-bit weights were changed in place
        since the last step (their _version moved): taken from the weights."""
        for k in u.keys:
            m = self._masters.get(k)
            if m is not None and self._params[k]._version != self._versions[k]:
                m.copy_(self._params[k].data.reshape(-1))
                self._versions[k] = self._params[k]._version

    def refresh_masters(self) -> None:
        """Takes the FP32 master weights from the 16-bit parameters (after a
        change the version counter misses: writes through .data; after
        gather_params() where the all-gathers are deferred)."""
        self.gather_params()
        with torch.no_grad():
            for k, m in self._masters.items():
                m.copy_(self._params[k].data.reshape(-1))
                self._versions[k] = self._params[k]._version
