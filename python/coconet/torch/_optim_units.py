"""coconet.torch.optim's plan: the units (each one program: a group's
parameters of one step count and type, or a bucket of them), which
program variant a group's settings choose, the programs' builds, and
each unit's slices of the optimizer state."""
import os

import torch

from . import CocoError, TYPE_NAMES, compile as _compile, empty
from ._build import build_lock, build_parallel, cache_dir as _cache_dir
from .. import optplan, programs
from ._optim_part import _Part


# the program's state inputs and torch's names for them
_STATE = (("m", "exp_avg"), ("v", "exp_avg_sq"), ("vm", "max_exp_avg_sq"))


def _program_text(kind, counts, dtype, options, ranks=None):
    """The one place where a group's settings choose the fused step's
    program: options (coconet.programs.optimizer's keyword arguments: decay
    "l2", amsgrad, maximize, capturable, ...; those of the plain program
    left out) go to coconet.programs.optimizer (with ranks, the all-gather
    deferred: coconet.programs.optimizer_rs at that many ranks), and one
    its build does not take is refused, named."""
    try:
        if ranks is not None:
            return programs.optimizer_rs(kind, counts, dtype, ranks, **dict(options))
        return programs.optimizer(kind, counts, dtype, **dict(options))
    except (TypeError, ValueError) as e:
        what = {"decay": "weight decay added to the gradient (Adam's weight_decay > 0, or "
                         "decoupled_weight_decay=False)",
                "clip": "clipping by the global norm (max_grad_norm, "
                        "coconet.torch.clip_grad_norm_)"}
        names = [what.get(k, "%s=%r" % (k, v)) for k, v in sorted(dict(options).items())]
        if ranks is not None:
            raise CocoError("coconet.torch.optim: %s is not supported with "
                            "overlap_param_gather=True: the step without the all-gather has no "
                            "such variant (coconet.programs.optimizer_rs: %s)"
                            % (" and ".join(names) or "this program", e)) from None
        raise CocoError("coconet.torch.optim: %s is not supported yet: the fused step's program "
                        "has no such variant (coconet.programs.optimizer: %s)"
                        % (" and ".join(names) or "this program", e)) from None


# the schedule of the step without the all-gather (coconet.programs.optimizer_rs)
_RS_SCHEDULE = "paper"


def _prebuild(builds):
    """Builds the programs of `builds` (coconet.torch._build's Builds) into
    the cache, several nvcc at a time, before each is compiled in turn (then
    a cache hit): the buckets of a model are as many programs. A program
    that could not be built fails again, with its message, when compiled."""
    if len(builds) < 2:
        return
    jobs = max(1, min(len(builds), (os.cpu_count() or 2) // 2))
    with build_lock():
        build_parallel(builds, jobs)


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


class _Units(_Part):
    """Mixin of optim._Fused: plans its units and holds their state."""

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
        try:
            opts = programs.step_variant(self.kind, pg, "l2" if l2 else "decoupled",
                                         amp=self._amp_given())
        except ValueError as e:
            raise CocoError("coconet.torch.optim: %s" % e) from None
        opts = tuple(sorted(opts.items()))
        if check:
            _program_text(self.kind, [1], "FP32", opts)
            if self._defer:
                _program_text(self.kind, [1], "FP32", opts, ranks=self._sess.nranks)
        return opts

    def _amp_given(self):
        """Whether a GradScaler steps now (torch's GradScaler.step gives
        grad_scale and found_inf to a step that supports AMP scaling)."""
        return getattr(self, "grad_scale", None) is not None or \
            getattr(self, "found_inf", None) is not None

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
        want, opts = self._wanted(active, keep)
        self._check_whole_groups(want)
        new = self._matching(want, opts)
        for u in self._units:
            if not any(u is n for n in new):
                self._dissolve(u)
        paths = {ident: self._program_paths(ident, opts[ident.gi])
                 for ident, n in zip(want, new) if n is None}
        _prebuild(self._builds({b for builds in paths.values() for b in builds}))
        self._units = [n if n is not None else self._make_unit(ident, opts[ident.gi],
                                                               paths[ident])
                       for ident, n in zip(want, new)]
        self._launcher = optplan.Launcher([u.ident for u in self._units]) \
            if self._overlap else None
        self._unit_of = {k: u for u in self._units for k in u.keys}

    def _wanted(self, active, keep):
        """The units a step over the keys `active` is made of (keep: those
        started in the backward pass already), and each group's program
        options (_options)."""
        members = [optplan.Member(k, self._groups_of[k], self._step_of(k),
                                  TYPE_NAMES[self._params[k].dtype],
                                  self._params[k].numel() * self._params[k].element_size())
                   for k in active]
        # overlapped: members in the backward's order (the buckets'); else in key
        # order, so that a group's program is the same from run to run
        order = optplan.full_order(self._order, active) if self._overlap else sorted(active)
        want = optplan.plan_units(members, order, self._cap, keep=[u.ident for u in keep])
        return want, [self._options(pg) for pg in self.param_groups]

    def _builds(self, paths):
        """(path, schedule) pairs as Builds (coconet.torch._build) on this
        optimizer's session, in path order."""
        home = getattr(self._sess, "nccl_home", None)
        return [(path, schedule, {}, self._sess.nranks, home) for path, schedule in sorted(paths)]

    def _builds_ahead(self):
        """The Builds of each program that the next step would compile anew
        if every parameter that requires a gradient has one, written into
        the cache for coconet.torch.tp.prebuild to build with the layers'
        programs. Planned as that step plans, with the settings of
        now (no GradScaler's variant: a step that plans otherwise builds
        what it lacks then). None with overlap=True before a backward pass
        has shown the order of the gradients, which cuts the buckets."""
        if self._overlap and not self._order:
            return []
        active = [k for k, p in enumerate(self._params) if p.requires_grad]
        want, opts = self._wanted(active, [])
        return self._builds({b for ident, unit in zip(want, self._matching(want, opts))
                             if unit is None for b in self._program_paths(ident, opts[ident.gi])})

    def _plan_stale(self, active, launched):
        if not self._units and active:
            return True
        planned = {k for u in self._units for k in u.keys}
        if planned != set(active):
            return True
        return any(not u.same(u.ident, self._options(self.param_groups[u.gi]))
                   for u in self._units)

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

    def _program_paths(self, ident, options):
        """The unit's programs, written into the cache (its text's hash names
        it), with their schedules: its fused step; or, with the all-gather
        deferred, its step without it and its gather."""
        counts = [self._params[k].numel() for k in ident.members]
        d = os.path.join(_cache_dir(), "torch-programs")
        if not self._defer:
            text = _program_text(self.kind, counts, ident.dtype, dict(options))
            return [(programs.write(text, self.kind, d), self._schedule)]
        n = self._sess.nranks
        text = _program_text(self.kind, counts, ident.dtype, dict(options), ranks=n)
        gather = programs.param_gather(counts, ident.dtype, n)
        return [(programs.write(text, self.kind + "_rs", d), _RS_SCHEDULE),
                (programs.write(gather, "gather", d), "program")]

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

    def _make_unit(self, ident, options, builds):
        u = _Unit(ident, options)
        ps = [self._params[k] for k in u.keys]
        u.fn = _compile(builds[0][0], schedule=builds[0][1], group=self._pg)
        spec = u.fn.spec
        u.names = [n for n, _ in _STATE if any(s.name == n for s in spec.inputs)]
        u.sliced = spec.input("m").kind == "tensor"
        u.sizes = self._slice_sizes(u, ps)
        counts = [p.numel() for p in ps]
        pad = programs.slice_layout(counts, self._sess.nranks)[1] if self._defer else 0
        # the padding of the deferred gather's slices: a last member that no
        # parameter's key names (its index is len(u.keys))
        u.pieces = optplan.member_pieces(counts + ([pad] if pad else []), u.sizes,
                                         self._sess.rank)
        u.pieces.pop(len(counts), None)
        u.bufs, u.state = [], {}
        for name in u.names:
            buf = self._buffer(max(u.sizes))
            u.bufs.append(buf)
            u.state[name] = buf[:u.sizes[self._sess.rank]]
            self._fill_from_parked(u, name, ps)
        for k in u.keys:
            self._parked.pop(k, None)
        if self._defer:
            self._make_gather(u, builds[1][0], _compile, pad)
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

    def _buffer(self, n, dtype=torch.float32):
        """A flat buffer of at least n elements in the arena: one given back
        by a dissolved unit, else a new one (the same sizes on every rank:
        the arena's allocations are collective)."""
        fits = [b for b in self._pool if b.dtype == dtype and b.numel() >= n]
        if fits:
            b = min(fits, key=lambda t: t.numel())
            self._pool = [x for x in self._pool if x is not b]
            return b
        return empty([max(n, 1)], dtype, self._pg)

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
