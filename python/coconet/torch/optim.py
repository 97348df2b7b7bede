"""coconet.torch.optim: data-parallel Adam, AdamW and LAMB as
torch.optim.Optimizers, each step one fused RS-Opt-AG per unit of
parameters (the paper's fuse(RS-Opt-AG), coconet.programs.optimizer): the
gradients are summed over the ranks and averaged (as DDP does), each rank
updates its slice of the parameters with its slice of the optimizer state,
and the updated slices are gathered into every rank's parameters, in one
FusedAllReduce. It replaces DDP's gradient AllReduce and the optimizer:
wrap the model in nothing, call backward, then step.

    opt = optim.AdamW(model.parameters(), lr=3e-4)            # torch's signature
    opt = optim.AdamW(params, lr=3e-4, overlap=True)          # stepped during backward
    ...
    opt.zero_grad(); loss.backward(); opt.step()

torch's semantics, and what is refused:
  - Adam (weight decay added to the gradient, default 0) and AdamW
    (decoupled, default 0.01), with torch.optim.Adam's and AdamW's
    signatures; decoupled_weight_decay in a group decides, as in torch.
    foreach and fused are accepted and change nothing. amsgrad (its state
    max_exp_avg_sq), maximize, capturable and Adam's L2 decay are program
    variants (_options, coconet.programs.step_variant): a group's settings
    choose its program. differentiable=True is refused (CocoError).
  - Parameter groups, including add_param_group later; every group's lr,
    betas, eps and weight_decay are read at each step, so lr_schedulers
    work (OneCycleLR writes betas).
  - A parameter whose .grad is None at a step is skipped: no decay, no
    state change, its step count kept. Every rank must agree: the ranks
    compare which parameters have a gradient before each step (a small
    collective over a CPU group, no GPU synchronisation) and refuse,
    naming the parameter and the ranks, where they differ. Parameters of
    one group with different step counts (frozen, then unfrozen) are
    stepped by separate programs, each with its own bias correction.
  - zero_grad(set_to_none=True) sets the gradients to None, as torch does;
    the next backward's gradients are then copied into the arena (one
    device copy per parameter, made by a post-accumulate-grad hook).
    zero_grad(set_to_none=False) zeroes them in place, where autograd
    accumulates into the arena with no copy: the faster choice.
  - optimizer.state[p] holds "step" (a CPU float tensor, as torch's); at
    P = 1 also "exp_avg" and "exp_avg_sq" shaped like p (live views);
    at P > 1 this rank keeps only a piece of p's state:
    "exp_avg_local", "exp_avg_sq_local" (flat) and "local_range" (its
    elements of p.view(-1)). A parameter that was stepped and is now
    skipped holds its whole state, under torch's names.
  - At construction the parameters are broadcast from rank 0 of the group
    (broadcast=True), as DDP does; buffers (BatchNorm statistics) are not
    the optimizer's: coconet.torch.broadcast_module(model) does both, once.
  - FP16 or BF16 parameters get FP32 master weights (replicated: 4 bytes per
    parameter on every rank), from which the program writes the rounded
    weights. A change of the 16-bit weights by an in-place op that torch
    counts (model.load_state_dict, torch.nn.init: the tensor's _version)
    refreshes their masters at the next step; refresh_masters() does it
    explicitly (after writes through .data).
  - An optimizer made again over the same parameters (after a
    checkpoint, say) takes them over; the earlier one no longer sees
    their gradients.

Clipping, GradScaler and capturable steps (the unit's program variant,
from its group's max_grad_norm, amsgrad, maximize and capturable and
whether a GradScaler scales the step; a step that needs another variant
than the last plans its units again, a collective):
  - coconet.torch.clip_grad_norm_ (or a group's max_grad_norm) clips by
    the norm of the summed, averaged gradient inside the step and returns
    that norm as a tensor written by the step (torch's
    clip_grad_norm_ before step() would see each rank's local gradients).
    A group so clipped must be one program: refused where buckets
    (overlap=True) or different step counts cut it.
  - Under a GradScaler (coconet.torch.GradScaler at P > 1, so that the
    ranks' scales agree) the step unscales, checks the summed gradient for
    Inf and NaN and skips on every rank together. Each unit decides on its
    own gradients, where torch skips every group when any has an Inf (the
    scale follows the largest found). Refused with overlap=True: the
    buckets stepped during the backward pass cannot read the step's scale.
    With a GradScaler the step count lives on the device (a skipped step
    does not count); state[p]["step"] catches up at state_dict().
  - capturable=True reads lr (a float, or a tensor that a scheduler writes
    in place) and the step count from device memory (coconet.torch._step),
    so that a step captured in a CUDA graph replays with a changing lr.
_device_inputs, _outputs, _before and _received are where the step passes
device tensors to a program and reads what it returns.

Checkpoints (every one collective, unless said):
  - state_dict() on every rank gives torch.optim.AdamW's layout (per
    parameter step, exp_avg, exp_avg_sq, and master_param for 16-bit
    ones), gathered one program at a time onto the CPU. It loads into
    torch.optim.AdamW and back (load_state_dict takes torch's).
  - consolidate_state_dict(to=0) on every rank gathers it on rank `to`
    only; then state_dict() on that rank alone returns it.
  - Calling state_dict() on one rank only (`if rank == 0:
    torch.save(opt.state_dict())`) fails fast: the ranks compare what they
    are doing, and a rank alone in a collective call is refused with the
    right idiom, after COCONET_OPTIM_TIMEOUT seconds (default 60) where the
    others never come.
  - sharded_state_dict(prefix) gives this rank's pieces for
    torch.distributed.checkpoint.save (each rank its own slice, under keys
    that say which elements they hold); load_sharded_state_dict(path,
    prefix) loads them at any world size, each rank reading what its slice
    needs (path: the checkpoint's directory, which every rank reads; put
    the pieces at the top level of the dict given to save, beside the
    model's, so that their keys keep the prefix).
  - load_state_dict refreshes the FP32 masters (from master_param, else
    from the 16-bit weights).

The step overlapped with the backward pass (overlap=True): the gradients
are cut into buckets of bucket_mb MiB in the order the backward pass
finishes them (post-accumulate-grad hooks, rank 0's order of the first
backward), and each bucket's whole fused RS-Opt-AG starts on a side stream
as soon as its last gradient is final, while the backward pass goes on;
step() makes the current stream wait for them and steps what is left. The
parameters thus change during the backward pass: read them after step().
The first step runs after its backward (it learns the order). Gradient
accumulation: run every micro-batch but the last under `with
opt.no_sync():` (nothing communicates there); a gradient accumulated after
its bucket was stepped is refused. overlap_param_gather=True (the
all-gather deferred to the next forward) is refused until the programs have
an RS-Opt variant without the all-gather. At P = 1 the same plumbing runs
with no communication. LAMB takes no buckets (its group-wide trust ratio,
"trust": "group", is over a unit's parameters).

Where things lie. The parameters are moved into flat buffers of the arena
(coconet.torch.empty; param.data becomes a view of it) and each param.grad
is a view of a second flat buffer, so autograd accumulates the gradients
there and the programs take both as scattered tensors, member by member.
An optimizer that opens its group's session makes the arena as large as
its buffers need (_arena_need), not the 4 GiB default; COCONET_ARENA_BYTES,
or coconet.torch.session(group, arena_bytes) called first, decides instead
(give more where groups will be added or parameters unfrozen later).
coconet.torch.arena_bytes() reports the arena's size and use.

Constraints: parameters lie on this rank's GPU and are FP32, FP16 or BF16;
each unit is its own program (built at its first step: nvcc takes minutes
for a first build of a model, then the cache serves it)."""
import contextlib
import datetime
import os
import pickle
import weakref

import torch
import torch.distributed as dist

from . import CocoError, TYPE_NAMES, _cache_dir, compile as _compile, empty, is_open, session
from .. import optplan, programs
from ._step import DeviceScalars

_SLACK = 64 << 20  # bytes: the programs' workspaces (reduction partials) and alignment
_PER_UNIT = 1 << 20  # bytes: each further program's own workspace
# the program's state inputs and torch's names for them
_STATE = (("m", "exp_avg"), ("v", "exp_avg_sq"), ("vm", "max_exp_avg_sq"))
_TIMEOUT = float(os.environ.get("COCONET_OPTIM_TIMEOUT", "60"))
_LIVE = weakref.WeakSet()  # the fused optimizers, for clip_grad_norm_ (_owner)


def _nranks(group):
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def _arena_need(param_groups, group, units=1):
    """The arena bytes this optimizer's buffers take: the flat parameters
    and gradients, a staging buffer as large as the gradients (the push
    algorithm's), FP32 master weights for 16-bit parameters and this rank's
    slices of m, v and amsgrad's vm; and some slack, more with more units
    (buckets)."""
    nranks = _nranks(group)
    need = _SLACK + _PER_UNIT * max(0, units - 1)
    for pg in param_groups:
        for dtype in {p.dtype for p in pg["params"]}:
            ps = [p for p in pg["params"] if p.requires_grad and p.dtype == dtype]
            if not ps:
                continue
            total = optplan.layout([p.numel() for p in ps], ps[0].element_size())[1]
            need += 3 * total * ps[0].element_size() + 3 * 4 * (-(-total // nranks)) + 4096
            if dtype != torch.float32:
                need += 4 * total
    return need


def _program_text(kind, counts, dtype, options):
    """The one place where a group's settings choose the fused step's
    program: options (coconet.programs.optimizer's keyword arguments: decay
    "l2", amsgrad, maximize, capturable, ...; those of the plain program
    left out) go to coconet.programs.optimizer, and one its build does not
    take is refused, named."""
    try:
        return programs.optimizer(kind, counts, dtype, **dict(options))
    except (TypeError, ValueError) as e:
        what = {"decay": "weight decay added to the gradient (Adam's weight_decay > 0, or "
                         "decoupled_weight_decay=False)"}
        names = [what.get(k, "%s=%r" % (k, v)) for k, v in sorted(dict(options).items())]
        raise CocoError("coconet.torch.optim: %s is not supported yet: the fused step's program "
                        "has no such variant (coconet.programs.optimizer: %s)"
                        % (" and ".join(names) or "this program", e)) from None


_CPU_GROUPS = {}  # id of a process group (None: the default) -> its gloo group


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


_BUILD_ONE = ("import sys, coconet; from coconet import _session as S; "
              "S.build(coconet.load(sys.argv[1], ranks=int(sys.argv[2])), sys.argv[3], "
              "nccl_home=sys.argv[4] or None)")


def _prebuild(paths, schedule, nranks, nccl_home):
    """Builds the programs at `paths` into the cache, several nvcc at a time
    (child processes), before each is compiled in turn (then a cache hit):
    the buckets of a model are as many programs. Under the cache's build
    lock, so that one rank of a machine builds and the others wait."""
    import fcntl
    import subprocess
    import sys
    if len(paths) < 2:
        return
    d = _cache_dir()
    os.makedirs(d, exist_ok=True)
    jobs = max(1, min(len(paths), (os.cpu_count() or 2) // 2))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with open(os.path.join(d, "torch-build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            running = []
            for path in paths:
                if len(running) >= jobs:
                    running.pop(0).wait()
                running.append(subprocess.Popen(
                    [sys.executable, "-c", _BUILD_ONE, path, str(nranks), schedule,
                     nccl_home or ""], env=env, stdout=subprocess.DEVNULL))
            for p in running:
                p.wait()  # a failed build fails again, with its message, in compile
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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


def _hook(ref, k):
    """Parameter k's post-accumulate-grad hook: the optimizer's _on_grad,
    while the optimizer lives and still owns the parameter (an optimizer
    made later over the same parameters takes them over)."""
    def hook(p):
        opt = ref()
        if opt is not None and getattr(p, "_coconet_optimizer", None) is ref:
            opt._on_grad(k, p)
    return hook


class _Unit:
    """One program's step: the parameters (by key) of one group with one
    step count and type, their tensors, and this rank's slices of their
    state (m, v and, with amsgrad, vm)."""

    def __init__(self, ident, options):
        self.ident, self.options = ident, options
        self.gi, self.step = ident.gi, ident.step
        self.keys = ident.members
        self.bound = None
        self.scalars = None  # its device scalars (coconet.torch._step), made at bind
        self.step_t = torch.tensor(float(self.step))

    def same(self, ident, options):
        return (self.ident.gi, self.ident.dtype, self.keys, self.options) == \
            (ident.gi, ident.dtype, ident.members, options)


class _Fused(torch.optim.Optimizer):
    kind = None
    _step_supports_amp_scaling = True  # GradScaler gives grad_scale and found_inf to step

    def __init__(self, params, defaults, group=None, schedule="paper", overlap=False,
                 bucket_mb=25, overlap_param_gather=False, broadcast=True):
        _check_defaults(type(self).__name__, defaults)
        if overlap_param_gather:
            raise CocoError("coconet.torch.optim: overlap_param_gather=True is not supported yet: "
                            "it needs a program that reduce-scatters and steps without the "
                            "all-gather (coconet.programs.optimizer)")
        if bucket_mb is not None and bucket_mb <= 0:
            raise ValueError("bucket_mb must be > 0 (or None: one bucket per group)")
        super().__init__(params, defaults)
        self._pg = group
        self._schedule = schedule
        self._overlap = bool(overlap)
        cap = None if bucket_mb is None or self.kind == "lamb" else int(bucket_mb * (1 << 20))
        self._cap = cap if self._overlap else None
        self._open_session()
        self._cpu = _cpu_group(group) if self._sess.nranks > 1 else None
        self._broadcast = broadcast
        self._init_books()
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
        self._norms, self._found = {}, None  # per group the clipped norm; the step's found
        self._ref = weakref.ref(self)

    def _open_session(self):
        if not is_open(self._pg) and not os.environ.get("COCONET_ARENA_BYTES"):
            # the optimizer opens the session: an arena of what it needs, not
            # the 4 GiB default (the rest is the model's: larger micro-batches)
            nbytes = sum(p.numel() * p.element_size() for pg in self.param_groups
                         for p in pg["params"] if p.requires_grad)
            units = nbytes // self._cap + 2 * len(self.param_groups) if self._cap else 1
            self._sess = session(self._pg, arena_bytes=_arena_need(self.param_groups, self._pg,
                                                                   units))
        else:
            self._sess = session(self._pg)

    # ---- parameters: groups, the arena, hooks ----

    def add_param_group(self, param_group):
        """torch's add_param_group; the new group's parameters move into the
        arena, and its programs are built at its first step. Collective."""
        super().add_param_group(param_group)
        if hasattr(self, "_params"):  # not during torch's __init__
            self._sync_side()
            if self._sess.nranks > 1:
                self._agree("add_param_group()")
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

    def _options(self, pg, check=False):
        """The program variant group pg's settings ask for, as a sorted tuple
        of coconet.programs.optimizer's keyword arguments that differ from
        the plain program's (coconet.programs.step_variant: decay "l2",
        amsgrad, maximize, capturable, clip from max_grad_norm, amp while a
        GradScaler steps, LAMB's trust); with check, refused where the build
        has none (see _program_text). The one place to extend with further
        settings."""
        if pg.get("differentiable"):
            raise CocoError("coconet.torch.optim: differentiable=True is refused: the fused step "
                            "runs outside autograd")
        l2 = self.kind == "adam" and not pg.get("decoupled_weight_decay", True) \
            and float(pg["weight_decay"]) != 0.0  # no decay: both formulas are the plain one
        amp = getattr(self, "grad_scale", None) is not None or \
            getattr(self, "found_inf", None) is not None
        try:
            opts = programs.step_variant(self.kind, pg, "l2" if l2 else "decoupled", amp=amp)
        except ValueError as e:
            raise CocoError("coconet.torch.optim: %s" % e) from None
        opts = tuple(sorted(opts.items()))
        if check:
            _program_text(self.kind, [1], "FP32", opts)
        return opts

    # ---- gradients ----

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
    def no_sync(self):
        """Gradient accumulation: backward passes inside accumulate the
        gradients and start nothing; the last micro-batch's backward, outside,
        starts the buckets (overlap=True), or step() does."""
        old, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = old

    def zero_grad(self, set_to_none=True):
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

    # ---- the plan: units of parameters, each one program ----

    def _step_of(self, k):
        for u in self._units:
            if k in u.keys:
                return u.step
        return self._parked.get(k, {}).get("step", 0)

    def _plan(self, active, keep):
        """The units for this step's parameters (kept: those started in the
        backward pass); units that stay the same keep their state, the others
        give theirs back (gathered) and new ones take their slices."""
        for u in self._units:
            self._sync_step(u)
        self._to_arena(active)
        members = [optplan.Member(k, self._groups_of[k], self._step_of(k),
                                  TYPE_NAMES[self._params[k].dtype],
                                  self._params[k].numel() * self._params[k].element_size())
                   for k in active]
        # overlapped: members in the backward's order (the buckets'); else in key
        # order, so that a group's program is the same from run to run
        order = optplan.full_order(self._order, active) if self._overlap else sorted(active)
        want = optplan.plan_units(members, order, self._cap, keep=[u.ident for u in keep])
        self._check_whole_groups(want)
        opts = [self._options(pg) for pg in self.param_groups]
        new = self._matching(want, opts)
        for u in self._units:
            if not any(u is n for n in new):
                self._dissolve(u)
        paths = {ident: self._program_path(ident, opts[ident.gi])
                 for ident, n in zip(want, new) if n is None}
        _prebuild(sorted(set(paths.values())), self._schedule, self._sess.nranks,
                  getattr(self._sess, "nccl_home", None))
        self._units = [n if n is not None else self._make_unit(ident, opts[ident.gi],
                                                               paths[ident])
                       for ident, n in zip(want, new)]
        self._launcher = optplan.Launcher([u.ident for u in self._units]) \
            if self._overlap else None

    def _matching(self, want, opts):
        """Per wanted unit, the current unit that already is it (the same
        members and program options; one started in this backward pass is
        kept as it is), else None."""
        new = []
        for ident in want:
            same = [u for u in self._units
                    if u.ident is ident or u.same(ident, opts[ident.gi])]
            new.append(same[0] if same else None)
        return new

    def _program_path(self, ident, options):
        """The unit's program, written into the cache (its text's hash names it)."""
        counts = [self._params[k].numel() for k in ident.members]
        text = _program_text(self.kind, counts, ident.dtype, dict(options))
        return programs.write(text, self.kind, os.path.join(_cache_dir(), "torch-programs"))

    def _check_whole_groups(self, units):
        """A norm over a whole group (max_grad_norm's clipping) needs the
        group in one program: refused where it is cut into several (buckets,
        or parameters at different step counts)."""
        count = {}
        for u in units:
            count[u.gi] = count.get(u.gi, 0) + 1
        for gi, n in count.items():
            if n > 1 and self.param_groups[gi].get("max_grad_norm") is not None:
                raise CocoError(
                    "coconet.torch.optim: group %d clips by its global norm (max_grad_norm) but "
                    "its step is cut into %d programs (%s): the norm would be each program's; "
                    "use overlap=False and train the group's parameters alike"
                    % (gi, n, "buckets of the overlapped mode" if self._cap
                       else "parameters at different step counts"))

    def _make_unit(self, ident, options, path):
        u = _Unit(ident, options)
        ps = [self._params[k] for k in u.keys]
        u.fn = _compile(path, schedule=self._schedule, group=self._pg)
        spec = u.fn.spec
        u.names = [n for n, _ in _STATE if any(s.name == n for s in spec.inputs)]
        u.sliced = spec.input("m").kind == "tensor"
        u.sizes = self._slice_sizes(u, ps)
        u.pieces = optplan.member_pieces([p.numel() for p in ps], u.sizes, self._sess.rank)
        u.bufs, u.state = [], {}
        for name in u.names:
            buf = self._buffer(max(u.sizes))
            u.bufs.append(buf)
            u.state[name] = buf[:u.sizes[self._sess.rank]]
            self._fill_from_parked(u, name, ps)
        for k in u.keys:
            self._parked.pop(k, None)
        self._publish(u)
        return u

    def _slice_sizes(self, u, ps):
        """Each rank's element count of the unit's state (its slice, or the
        whole of it where the schedule does not slice)."""
        total = sum(p.numel() for p in ps)
        if not u.sliced:
            return [total] * self._sess.nranks
        prog = u.fn.spec._prog
        out = []
        for r in range(self._sess.nranks):
            n = 1
            for d in prog.tensor_info("m", r).local_shape:
                n *= d
            out.append(n)
        return out

    def _buffer(self, n):
        """A flat FP32 buffer of at least n elements in the arena: one given
        back by a dissolved unit, else a new one (the same sizes on every
        rank: the arena's allocations are collective)."""
        fits = [b for b in self._pool if b.numel() >= n]
        if fits:
            b = min(fits, key=lambda t: t.numel())
            self._pool.remove(b)
            return b
        return empty([max(n, 1)], torch.float32, self._pg)

    def _fill_from_parked(self, u, name, ps):
        """This rank's slice of state `name`: zeros, or from the members'
        parked whole state (torch's names)."""
        mine = u.state[name]
        mine.zero_()
        torch_name = dict(_STATE)[name]
        with torch.no_grad():
            for j, k in enumerate(u.keys):
                src = self._parked.get(k, {}).get(torch_name)
                if src is None or j not in u.pieces:
                    continue
                a, s, n = u.pieces[j]
                mine[s:s + n].copy_(src.reshape(-1)[a:a + n])

    def _dissolve(self, u):
        """The unit's state, gathered whole per parameter, parked (each rank
        alike); its buffers back to the pool."""
        self._sync_step(u)
        full = self._gather_unit(u)
        for j, k in enumerate(u.keys):
            entry = {"step": u.step}
            for name in u.names:
                entry[dict(_STATE)[name]] = full[name][j]
            self._parked[k] = entry
            self.state[self._params[k]] = self._parked_view(k)
        self._pool += u.bufs
        u.bufs = []

    def _parked_view(self, k):
        e = self._parked[k]
        out = {"step": torch.tensor(float(e["step"]))}
        out.update({n: t for n, t in e.items() if n != "step"})
        return out

    def _publish(self, u):
        """optimizer.state[p] of the unit's members: step (shared, updated in
        place), and the state as this rank holds it (see the module's
        documentation)."""
        whole = self._sess.nranks == 1 or not u.sliced
        for j, k in enumerate(u.keys):
            p = self._params[k]
            a, s, n = u.pieces.get(j, (0, 0, 0))  # none of p's state on this rank
            entry = {"step": u.step_t}
            for name in u.names:
                t = u.state[name][s:s + n]
                if whole:
                    entry[dict(_STATE)[name]] = t.view(p.shape)
                else:
                    entry[dict(_STATE)[name] + "_local"] = t
            if not whole:
                entry["local_range"] = (a, a + n)
            self.state[p] = entry

    # ---- the step ----

    def _bind(self, u):
        ps = [self._params[k] for k in u.keys]
        tensors = dict(g=[self._grads[k] for k in u.keys])
        if u.keys[0] in self._masters:
            tensors["p"] = [self._masters[k] for k in u.keys]
            tensors["w"] = ps
        else:
            tensors["p"] = ps
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
        GradScaler's scale and flag."""
        u.scalars.before(self.param_groups[u.gi], getattr(self, "grad_scale", None),
                         getattr(self, "found_inf", None))

    def _received(self, u, result):
        """After a step: a skipped step taken back from the device's step
        count, and its found kept for coconet.torch.GradScaler (the largest
        of the step's units)."""
        u.scalars.after(result)
        if isinstance(result, dict) and "found" in result:
            f = result["found"]
            self._found = f.clone() if self._found is None else torch.maximum(self._found, f)

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

    def _launch(self, u):
        """One unit's step on the current stream."""
        self._refresh_changed(u)
        if u.bound is None:
            self._bind(u)
        u.step += 1
        self._before(u)
        self._received(u, u.bound(**self._scalars(u)))
        u.step_t.fill_(float(u.step))

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

    @torch.no_grad()
    def step(self, closure=None):
        """Steps the parameters whose .grad is not None (those the backward
        pass has not stepped already, overlap=True): collective."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._refuse_amp_overlap()
        self._found = None
        active = self._active()
        launched = list(self._launched)
        if self._sess.nranks > 1:
            self._agree("step()", active, len(launched))
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

    def _refuse_amp_overlap(self):
        if self._overlap and (getattr(self, "grad_scale", None) is not None or
                              getattr(self, "found_inf", None) is not None):
            raise CocoError("coconet.torch.optim: a GradScaler with overlap=True is not "
                            "supported yet: the buckets stepped during the backward pass "
                            "cannot read the step's grad_scale and found_inf; use "
                            "overlap=False")

    def _plan_stale(self, active, launched):
        if not self._units and active:
            return True
        planned = {k for u in self._units for k in u.keys}
        if planned != set(active):
            return True
        return any(not u.same(u.ident, self._options(self.param_groups[u.gi]))
                   for u in self._units)

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

    # ---- FP32 masters ----

    def _refresh_changed(self, u):
        """Masters of members whose 16-bit weights were changed in place
        since the last step (their _version moved): taken from the weights."""
        for k in u.keys:
            m = self._masters.get(k)
            if m is not None and self._params[k]._version != self._versions[k]:
                m.copy_(self._params[k].data.reshape(-1))
                self._versions[k] = self._params[k]._version

    def refresh_masters(self):
        """Takes the FP32 master weights from the 16-bit parameters (after a
        change the version counter misses: writes through .data)."""
        self._sync_side()
        with torch.no_grad():
            for k, m in self._masters.items():
                m.copy_(self._params[k].data.reshape(-1))
                self._versions[k] = self._params[k]._version

    # ---- the state, gathered and scattered ----

    def _gather_unit(self, u, to=None):
        """Each member's whole state per name ({name: [tensor per member]},
        on this rank's GPU); to: only that rank gets them (others: None)."""
        ps = [self._params[k] for k in u.keys]
        out = {}
        for name in u.names:
            flat = self._gather_flat(u, u.state[name], to)
            if flat is None:
                out[name] = None
                continue
            cuts, parts = 0, []
            for p in ps:
                parts.append(flat[cuts:cuts + p.numel()].view(p.shape).clone())
                cuts += p.numel()
            out[name] = parts
        return out

    def _gather_flat(self, u, t, to):
        n = self._sess.nranks
        if n == 1 or not u.sliced:
            return t.reshape(-1)
        most = max(u.sizes)
        mine = torch.zeros(most, dtype=t.dtype, device=t.device)
        mine[:t.numel()].copy_(t.reshape(-1))
        if to is None:
            allp = torch.empty(most * n, dtype=t.dtype, device=t.device)
            dist.all_gather_into_tensor(allp, mine, group=self._pg)
        else:
            dst = dist.get_global_rank(self._pg, to) if self._pg is not None else to
            allp = torch.empty(most * n, dtype=t.dtype, device=t.device) \
                if self._sess.rank == to else None
            dist.gather(mine, list(allp.view(n, most)) if allp is not None else None, dst=dst,
                        group=self._pg)
            if allp is None:
                return None
        return torch.cat([allp[r * most:r * most + s] for r, s in enumerate(u.sizes)])

    def _packed_groups(self):
        out = []
        for gi, pg in enumerate(self.param_groups):
            entry = {k: v for k, v in pg.items() if k != "params"}
            entry["params"] = [self._where[id(p)] for p in pg["params"]]
            out.append(entry)
        return out

    def _state_entries(self, to=None):
        """torch.optim.AdamW's per-parameter state, on the CPU, one unit at a
        time (to: gathered on that rank only; None on the others)."""
        state = {}
        for u in self._units:
            self._sync_step(u)
            full = self._gather_unit(u, to)
            if any(v is None for v in full.values()):
                continue
            for j, k in enumerate(u.keys):
                entry = {"step": torch.tensor(float(u.step))}
                entry.update({dict(_STATE)[n]: full[n][j].cpu() for n in u.names})
                state[k] = entry
        for k, e in self._parked.items():
            state[k] = {n: (torch.tensor(float(t)) if n == "step" else t.detach().cpu().clone())
                        for n, t in e.items()}
        for k, m in self._masters.items():
            if k in state:
                state[k]["master_param"] = m.view(self._params[k].shape).cpu().clone()
        return state

    def state_dict(self):
        """torch.optim.AdamW's layout (see the module's documentation), the
        state on the CPU. Collective, unless consolidate_state_dict(to=this
        rank) ran before: then its result, on that rank alone."""
        if self._consolidated is not None:
            sd, self._consolidated = self._consolidated, None
            return sd
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("state_dict()", timeout=True)
        return {"state": self._state_entries(), "param_groups": self._packed_groups()}

    def consolidate_state_dict(self, to=0):
        """Gathers the state dict on rank `to` of the group only (as
        ZeroRedundancyOptimizer's); that rank's next state_dict() returns it
        with no collective. Collective."""
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("consolidate_state_dict()", timeout=True)
        state = self._state_entries(to=to if self._sess.nranks > 1 else None)
        if self._sess.rank == to:
            self._consolidated = {"state": state, "param_groups": self._packed_groups()}

    def load_state_dict(self, state_dict):
        """Takes a state dict of this class or of torch.optim.AdamW / Adam:
        the groups' settings, and each parameter's state, parked until the
        next step slices it over the ranks; the FP32 masters from
        master_param, else from the 16-bit weights. Collective."""
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("load_state_dict()", timeout=True)
        saved = state_dict["param_groups"]
        self._check_groups(saved)
        for pg, sg in zip(self.param_groups, saved):
            for name, value in sg.items():
                if name != "params":
                    pg[name] = value
            self._fix_group(pg)
            self._options(pg, check=True)
        self._drop_units()
        state = state_dict["state"]
        for pg, sg in zip(self.param_groups, saved):
            for p, idx in zip(pg["params"], sg["params"]):
                self._load_one(self._where[id(p)], state.get(idx))

    def _fix_group(self, pg):
        """A loaded group's settings that the class decides (AdamW: decoupled)."""

    def _check_groups(self, saved):
        if len(saved) != len(self.param_groups):
            raise CocoError("coconet.torch.optim: the state dict has %d parameter groups, this "
                            "optimizer %d" % (len(saved), len(self.param_groups)))
        for gi, (pg, sg) in enumerate(zip(self.param_groups, saved)):
            if len(sg["params"]) != len(pg["params"]):
                raise CocoError("coconet.torch.optim: group %d of the state dict has %d "
                                "parameters, this optimizer's %d"
                                % (gi, len(sg["params"]), len(pg["params"])))

    def _drop_units(self):
        """Forgets every unit (their state is replaced): buffers to the pool."""
        for u in self._units:
            self._pool += u.bufs
        self._units, self._launcher = [], None
        self._parked = {}
        self.state.clear()

    def _load_one(self, k, s):
        p = self._params[k]
        with torch.no_grad():
            if k in self._masters:
                src = s.get("master_param") if s else None
                self._masters[k].copy_(src.reshape(-1) if src is not None
                                       else p.data.reshape(-1))
                self._versions[k] = p._version
        if not s or "exp_avg" not in s:
            return
        entry = {"step": int(float(s.get("step", 0)))}
        for _, torch_name in _STATE:
            if torch_name in s:
                t = s[torch_name]
                if t.numel() != p.numel():
                    raise CocoError("coconet.torch.optim: the state dict's %s of %s has %d "
                                    "elements, the parameter %d"
                                    % (torch_name, self._describe(k), t.numel(), p.numel()))
                entry[torch_name] = t.detach().to(torch.float32).reshape(p.shape)
        self._parked[k] = entry
        self.state[p] = self._parked_view(k)

    # ---- torch.distributed.checkpoint ----

    def sharded_state_dict(self, prefix="optim"):
        """This rank's pieces of the state for torch.distributed.checkpoint
        .save: per parameter and state tensor, the elements this rank holds
        under optplan.piece_key (which says which they are); steps, masters
        and the groups' settings alike on every rank (saved once).
        Collective."""
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("sharded_state_dict()", timeout=True)
        out = {prefix + ".param_groups": pickle.dumps(self._packed_groups())}
        for u in self._units:
            self._sync_step(u)
            for j, k in enumerate(u.keys):
                out["%s.step.%d" % (prefix, k)] = torch.tensor(float(u.step))
                if j not in u.pieces:
                    continue
                a, s, n = u.pieces[j]
                for name in u.names:
                    key = optplan.piece_key(prefix, k, dict(_STATE)[name], a, a + n)
                    out[key] = u.state[name][s:s + n]
        for k, e in self._parked.items():
            out["%s.step.%d" % (prefix, k)] = torch.tensor(float(e["step"]))
            for name, t in e.items():
                if name != "step":
                    out[optplan.piece_key(prefix, k, name, 0, t.numel())] = t.reshape(-1)
        for k, m in self._masters.items():
            out[optplan.piece_key(prefix, k, "master_param", 0, m.numel())] = m
        return out

    def load_sharded_state_dict(self, checkpoint_id, prefix="optim"):
        """Loads what sharded_state_dict saved (at any world size): every
        parameter that requires a gradient is planned into units now, and
        each rank reads the pieces that cover its slices. Collective."""
        import torch.distributed.checkpoint as dcp
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("load_sharded_state_dict()", timeout=True)
        meta = dcp.FileSystemReader(checkpoint_id).read_metadata().state_dict_metadata
        saved = {}
        for key in meta:
            parsed = optplan.parse_piece_key(prefix, key)
            if parsed is not None:
                saved.setdefault(parsed[:2], []).append((parsed[2], parsed[3]))
        want = {prefix + ".param_groups": b""}
        want.update({"%s.step.%d" % (prefix, k): torch.zeros(()) for k in
                     range(len(self._params)) if "%s.step.%d" % (prefix, k) in meta})
        dcp.load(want, checkpoint_id=checkpoint_id)
        self._load_groups(pickle.loads(want[prefix + ".param_groups"]))
        self._drop_units()
        steps = {k: int(float(want["%s.step.%d" % (prefix, k)]))
                 for k in range(len(self._params)) if "%s.step.%d" % (prefix, k) in want}
        self._load_pieces(dcp, checkpoint_id, prefix, saved, steps)

    def _load_groups(self, saved):
        self._check_groups(saved)
        for pg, sg in zip(self.param_groups, saved):
            pg.update({n: v for n, v in sg.items() if n != "params"})
            self._fix_group(pg)
            self._options(pg, check=True)

    def _load_pieces(self, dcp, checkpoint_id, prefix, saved, steps):
        """Parks every saved parameter's state with its step, then plans the
        ones that require a gradient and fills their slices from the pieces
        (reads only what this rank's slices and masters need)."""
        for k in steps:
            self._parked[k] = {"step": steps[k]}
        self._plan([k for k in steps if self._params[k].requires_grad], [])
        reads = {}
        fills = self._unit_fills(prefix, saved, reads) + \
            self._parked_fills(prefix, saved, steps, reads)
        for k, m in self._masters.items():
            if (k, "master_param") in saved:
                fills += self._cover(prefix, saved, k, "master_param", 0, m, reads)
        dcp.load(reads, checkpoint_id=checkpoint_id)
        with torch.no_grad():
            for key, src_at, dst, dst_at, n in fills:
                dst[dst_at:dst_at + n].copy_(reads[key][src_at:src_at + n])
        for k in self._masters:
            self._versions[k] = self._params[k]._version
        for k in list(self._parked):
            if len(self._parked[k]) == 1:  # a step but no state tensors
                del self._parked[k]
            else:
                self.state[self._params[k]] = self._parked_view(k)

    def _unit_fills(self, prefix, saved, reads):
        """The copies that fill this rank's slices of the units' state."""
        fills = []
        for u in self._units:
            for j, k in enumerate(u.keys):
                if j not in u.pieces:
                    continue
                a, s, n = u.pieces[j]
                for name in u.names:
                    fills += self._cover(prefix, saved, k, dict(_STATE)[name], a,
                                         u.state[name][s:s + n], reads)
        return fills

    def _parked_fills(self, prefix, saved, steps, reads):
        """The copies that fill the whole state of saved parameters left out
        of the units (not requiring a gradient now), parked."""
        planned = {k for u in self._units for k in u.keys}
        fills = []
        for k in steps:
            for _, tname in _STATE:
                if k not in planned and (k, tname) in saved:
                    t = torch.empty(self._params[k].numel())
                    fills += self._cover(prefix, saved, k, tname, 0, t, reads)
                    self._parked[k][tname] = t.view(self._params[k].shape)
        return fills

    def _cover(self, prefix, saved, k, name, start, dst, reads):
        """The reads (into `reads`, by key) and copies that fill dst with
        elements [start, start + dst.numel()) of parameter k's `name`."""
        pieces = saved.get((k, name))
        if pieces is None:
            raise CocoError("coconet.torch.optim: the checkpoint has no %s for %s"
                            % (name, self._describe(k)))
        out = []
        for (a, b), src_at, dst_at, n in optplan.cover(pieces, start, start + dst.numel()):
            key = optplan.piece_key(prefix, k, name, a, b)
            if key not in reads:
                reads[key] = torch.empty(b - a)
            out.append((key, src_at, dst.reshape(-1), dst_at, n))
        return out


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


def _adam_defaults(lr, betas, eps, weight_decay, amsgrad, foreach, maximize, capturable,
                   differentiable, fused, decoupled):
    return dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                maximize=maximize, foreach=foreach, capturable=capturable,
                differentiable=differentiable, fused=fused, decoupled_weight_decay=decoupled)


class Adam(_Fused):
    """torch.optim.Adam's signature and formula (weight decay added to the
    gradient, default 0; decoupled_weight_decay=True makes it AdamW), one
    fused RS-Opt-AG per unit a step. coconet's arguments: group (the process
    group), schedule, overlap, bucket_mb, overlap_param_gather, broadcast;
    see the module's documentation."""
    kind = "adam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False, group=None,
                 schedule="paper", overlap=False, bucket_mb=25, overlap_param_gather=False,
                 broadcast=True):
        super().__init__(params, _adam_defaults(lr, betas, eps, weight_decay, amsgrad, foreach,
                                                maximize, capturable, differentiable, fused,
                                                decoupled_weight_decay),
                         group, schedule, overlap, bucket_mb, overlap_param_gather, broadcast)


class AdamW(Adam):
    """torch.optim.AdamW's signature and formula (decoupled weight decay,
    default 0.01); see Adam and the module's documentation."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None, group=None, schedule="paper",
                 overlap=False, bucket_mb=25, overlap_param_gather=False, broadcast=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, group=group, schedule=schedule,
                         overlap=overlap, bucket_mb=bucket_mb,
                         overlap_param_gather=overlap_param_gather, broadcast=broadcast)

    def _fix_group(self, pg):
        pg["decoupled_weight_decay"] = True  # as torch's AdamW, whatever was saved


class LAMB(_Fused):
    """Data-parallel LAMB: Adam's moments, u = m^/(sqrt(v^) + eps) + wd p,
    p -= lr ratio u with the trust ratio ||p|| / ||u|| (1 where either
    norm is 0) of each parameter tensor, as the LAMB paper and apex's
    FusedLAMB define it (trust="tensor"); trust="group" (the argument, or a
    parameter group's "trust") takes one ratio over all the parameters of
    a unit instead (a group's parameters with one step count:
    examples/lamb.coco, the CoCoNet paper's program). max_grad_norm clips
    by the global norm of the summed gradient first (None: no clipping).
    No buckets (overlap=True steps each unit whole once its gradients are
    final)."""
    kind = "lamb"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, *,
                 trust="tensor", max_grad_norm=None, group=None, schedule="paper",
                 overlap=False, broadcast=True):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, trust=trust,
                                      max_grad_norm=max_grad_norm),
                         group, schedule, overlap, None, False, broadcast)
