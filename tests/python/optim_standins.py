"""optim_standins.py: stand-ins for coconet.torch's session, arena and
compiled step, so that coconet.torch.optim runs on the CPU, at one rank or
at several (processes joined by torch.distributed's gloo backend): a
"compiled" program is the real program run by the CPU reference executor
(run_cpu) on every rank's bound tensors, gathered (test_optim_torch.py,
optim_ranks.py). Also the small model the checks train."""
import contextlib

import numpy as np
import torch
import torch.distributed as dist

import coconet
from coconet import _session as S
from coconet.torch import _optim_params, _optim_step, _optim_units, _step


class _Arena:
    def arena(self):
        return (0, 1 << 30, 0)


class Sess:
    """The session of a process group (None: the default), as the real
    one: this rank's place in that group and its size."""
    device = torch.device("cpu")

    def __init__(self, group=None):
        self.session = _Arena()
        self.group = group
        on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(group) if on else 0
        self.nranks = dist.get_world_size(group) if on else 1


def _flat(spec, value):
    if spec.kind == "scattered":
        return np.concatenate([v.detach().float().reshape(-1).numpy() for v in value])
    return value.detach().float().reshape(-1).numpy().copy()


def _put(spec, value, a):
    members = value if spec.kind == "scattered" else [value]
    at = 0
    for v in members:
        v.data.copy_(torch.from_numpy(a[at:at + v.numel()].copy()).view(v.shape))
        at += v.numel()


class Bound:
    """The program on the bound tensors: every rank's per-rank inputs
    gathered, run_cpu, this rank's part of the Updated ones written back,
    and of the outputs given tensors (bind's out)."""

    def __init__(self, fn, tensors, gscale, out=None):
        self.fn, self.t, self.scalars = fn, tensors, dict(gscale=gscale)
        self.out = dict(out or {})
        self.own = {}  # the outputs not given to bind: one tensor each, reused by every call

    def _inputs(self):
        run, inputs, per_rank = self.fn.run, {}, set()
        for s in self.fn.spec.inputs:
            if s.kind == "scalar":
                inputs[s.name] = self.scalars[s.name]
                continue
            info = run.tensor_info(s.name, 0)
            each, _ = run._parts(info.layout, info.group_ranks)
            a = _flat(s, self.t[s.name])
            if each is None:
                inputs[s.name] = a
            else:
                per_rank.add(s.name)
                inputs[s.name] = self._all(a)
        return inputs, per_rank

    def _all(self, a):
        if self.fn.nranks == 1:
            return [a]
        out = [None] * self.fn.nranks
        dist.all_gather_object(out, a, group=self.fn.group)
        return out

    def __call__(self, **scalars):
        self.scalars.update(scalars)
        inputs, per_rank = self._inputs()
        outputs, new = self.fn.run.run_cpu(inputs, with_inputs=True)
        with torch.no_grad():
            results = {}
            for o in self.fn.spec.outputs:
                if o.name not in outputs:  # an Updated input's new value: written below
                    continue
                t = self.out.get(o.name)
                if t is None:
                    t = self.own.setdefault(o.name, torch.empty(o.shape))
                a = outputs[o.name]
                a = a[self.fn.rank] if isinstance(a, list) else a
                t.copy_(torch.from_numpy(np.asarray(a).reshape(-1).copy()).view(t.shape))
                results[o.name] = t
            for s in self.fn.spec.inputs:
                if s.kind == "scalar" or s.name not in new or s.name == "g":
                    continue
                a = new[s.name]
                a = a[self.fn.rank] if s.name in per_rank else a
                _put(s, self.t[s.name], np.asarray(a).reshape(-1))
        Compiled.calls += 1
        return results  # as the real Bound: by name (the variant's found, say)


class Compiled:
    calls = 0
    built = []

    def __init__(self, path, schedule="program", group=None):
        sess = Sess(group)
        self.rank, self.nranks, self.group = sess.rank, sess.nranks, group
        self.path, self.schedule = path, schedule
        self.program = coconet.load(path, ranks=self.nranks)
        self.run = self.program if schedule == "program" else self.program.schedule(schedule)
        self.spec = S.VariantSpec(self.program, schedule, self.rank)
        Compiled.built.append(self)

    def bind(self, tensors, out=None, gscale=1.0):
        return Bound(self, tensors, gscale, out)


class _Stream:
    cuda_stream = 0

    def wait_stream(self, other):
        pass


def install(setattr_):
    """The stand-ins in place of the session, arena, compiler and CUDA
    streams (setattr_: pytest's monkeypatch.setattr, or setattr)."""
    sess = Sess()
    setattr_(_optim_params, "session",
             lambda group=None, arena_bytes=None: sess if group is None else Sess(group))
    setattr_(_optim_params, "is_open", lambda group=None: True)
    for module in (_optim_params, _optim_units, _optim_step, _step):
        setattr_(module, "empty", lambda shape, dtype, group=None: torch.empty(shape, dtype=dtype))
    setattr_(_optim_units, "_compile", Compiled)
    setattr_(_optim_units, "_prebuild", lambda builds: None)
    setattr_(torch.cuda, "Stream", lambda *a, **k: _Stream())
    setattr_(torch.cuda, "current_stream", lambda *a, **k: _Stream())
    setattr_(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    Compiled.built = []
    return sess


# ---- a small model and its reference ----

def model(seed=3, dtype=torch.float32):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                            torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    return m.to(dtype)


def twin(m):
    r = model()
    r.load_state_dict(m.state_dict())
    return r


def loss_of(m, step, rank=0):
    g = torch.Generator().manual_seed(step * 10 + rank)
    x = torch.randn(5, 6, generator=g)
    y = torch.randint(0, 3, (5,), generator=g)
    return torch.nn.functional.cross_entropy(m(x.to(next(m.parameters()).dtype)).float(), y)


def train(m, opt, steps, sched=None, before=None, rank=0, first=1):
    for step in range(first, first + steps):
        if before:
            before(step)
        opt.zero_grad()
        loss_of(m, step, rank).backward()
        opt.step()
        if sched:
            sched.step()


def close(a, b, rtol=2e-5):
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.float(), q.float(), rtol=rtol, atol=1e-6), (p, q)


def groups(m):
    ps = list(m.parameters())
    return [{"params": [p for p in ps if p.dim() > 1]},
            {"params": [p for p in ps if p.dim() == 1], "weight_decay": 0.0, "lr": 2e-3}]


def inf_hook(param, now):
    """A tensor hook on param that puts an Inf into its gradient while
    now["what"] == "param" (it runs before the optimizer's
    post-accumulate-grad hook sees the gradient); its handle."""
    def with_inf(g):
        if now.get("what") != "param":
            return g
        g = g.clone()
        g.view(-1)[0] = float("inf")
        return g
    return param.register_hook(with_inf)


def amp_train(m, opt, scaler, steps, inject=None, rank=0):
    """steps of a GradScaler's loop (scale(loss).backward(), step, update);
    inject: {step: "loss"} makes that step's loss Inf (every gradient
    non-finite, as an overflow does), {step: "param"} puts an Inf into the
    gradient of parameter 2 only (a tensor hook: before the optimizer's
    post-accumulate-grad hook sees it). The scale after each step."""
    inject = inject or {}
    now = {}
    hook = inf_hook(list(m.parameters())[2], now)
    scales = []
    for step in range(1, steps + 1):
        now["what"] = inject.get(step)
        opt.zero_grad()
        loss = loss_of(m, step, rank)
        if now["what"] == "loss":
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    hook.remove()
    return scales
