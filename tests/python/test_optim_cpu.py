"""test_optim_cpu.py: coconet.torch.optim's step plumbing (the program
variant a group's settings and a GradScaler ask for, the device scalars,
clip_grad_norm_, GradScaler) on the CPU at one rank, against torch's own
optimizers on the CPU. The GPU session is replaced by a stand-in: the
compiled program runs on the CPU reference executor (run_cpu), reading
and writing the bound torch tensors. Skipped where torch is not installed
(make test needs no torch); the GPU twin is tests/gpu/torch_optstep.py's
optim_amp_clip."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import coconet  # noqa: E402
import coconet.torch as ct  # noqa: E402
from coconet import _session as S  # noqa: E402
from coconet.torch import optim  # noqa: E402


class FakeSession:
    device, nranks, rank = torch.device("cpu"), 1, 0


def flat(x):
    if isinstance(x, list):
        return np.concatenate([t.detach().reshape(-1).numpy().astype(np.float64) for t in x])
    return x.detach().numpy().astype(np.float64)


def put(x, value):
    """Writes value (NumPy, the whole tensor) into tensor x or its members."""
    value = np.asarray(value, dtype=np.float64).reshape(-1)
    parts = x if isinstance(x, list) else [x]
    at = 0
    for t in parts:
        n = t.numel()
        t.copy_(torch.from_numpy(value[at:at + n].copy()).reshape(t.shape))
        at += n


class FakeBound:
    def __init__(self, fn, tensors, out, scalars):
        self.fn, self.tensors, self.out, self.scalars = fn, tensors, dict(out or {}), scalars

    def __call__(self, **scalars):
        self.scalars.update(scalars)
        run = self.fn.run
        ins = {k: flat(v) for k, v in self.tensors.items()}
        ins = {k: [v] if run.tensor_info(k).layout != "Replicated" else v  # one rank's part
               for k, v in ins.items()}
        ins.update(self.scalars)
        out, new = run.run_cpu(ins, with_inputs=True)
        for name, t in self.tensors.items():
            if name in ("p", "w", "m", "v", "vm"):
                put(t, new[name][0] if isinstance(new[name], list) else new[name])
        results = {}
        for name, value in out.items():
            if name in ("p_", "w_"):
                results[name] = self.tensors[name[0]]
            else:
                t = self.out.get(name, torch.zeros(()))
                t.fill_(float(value))
                results[name] = t
        return results if len(results) > 1 else next(iter(results.values()))


class FakeFn:
    def __init__(self, path, schedule="program", group=None):
        base = coconet.load(path, ranks=1)
        self.run = base if schedule == "program" else base.schedule(schedule)
        self.spec = S.VariantSpec(base, schedule, 0)

    def bind(self, tensors, out=None, **scalars):
        return FakeBound(self, tensors, out, scalars)


@pytest.fixture
def cpu_session(monkeypatch, tmp_path):
    from coconet.torch import _optim_params, _optim_step, _optim_units
    monkeypatch.setattr(_optim_params, "session", lambda group=None, arena_bytes=None: FakeSession())
    monkeypatch.setattr(_optim_params, "is_open", lambda group=None: True)
    for module in (_optim_params, _optim_units, _optim_step):
        monkeypatch.setattr(module, "empty", lambda shape, dtype, group=None: torch.empty(shape, dtype=dtype))
    monkeypatch.setattr(_optim_units, "_compile", FakeFn)
    monkeypatch.setattr(_optim_units, "_cache_dir", lambda: str(tmp_path))
    import coconet.torch._step as step
    monkeypatch.setattr(step, "empty", lambda shape, dtype, group=None: torch.empty(shape, dtype=dtype))


def model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def loss_of(m, k):
    g = torch.Generator().manual_seed(k)
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)
    return ((m(x) - y) ** 2).mean()


def test_amp_and_clipping_against_torch(cpu_session):
    """ct.GradScaler and ct.clip_grad_norm_ with optim.AdamW against
    torch.amp.GradScaler, unscale_, clip_grad_norm_ and AdamW(fused=True):
    an Inf at step 4 skips that step on both and halves both scales."""
    a, ref = model(), model()
    opt = optim.AdamW(a.parameters(), lr=1e-2, weight_decay=0.01)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01, fused=True)
    scaler = ct.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)
    rscaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)
    for k in range(1, 9):
        opt.zero_grad()
        scaler.scale(loss_of(a, k)).backward()
        if k == 4:
            next(a.parameters()).grad[0, 0] = float("inf")
        norm = ct.clip_grad_norm_(a.parameters(), 0.05)
        scaler.step(opt)
        scaler.update()
        ropt.zero_grad()
        rscaler.scale(loss_of(ref, k)).backward()
        if k == 4:
            next(ref.parameters()).grad[0, 0] = float("inf")
        rscaler.unscale_(ropt)
        rnorm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
        rscaler.step(ropt)
        rscaler.update()
        assert scaler.get_scale() == rscaler.get_scale(), k
        if k != 4:
            assert abs(float(norm) - float(rnorm)) <= 1e-5 * float(rnorm), k
        for p, q in zip(a.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), k
    # planned again at the first scaled step
    assert dict(opt._units[0].options) == dict(clip=True, amp=True)
    assert opt.state_dict()["state"][0]["step"] == ropt.state_dict()["state"][0]["step"] == 7


def test_amsgrad_maximize_and_a_tensor_lr(cpu_session):
    """Group settings choose the variant: amsgrad and maximize as torch's,
    a tensor lr read at every step (capturable: from device memory)."""
    a, ref = model(), model()
    lr = torch.tensor(1e-2)
    opt = optim.AdamW([{"params": list(a.parameters()), "amsgrad": True, "maximize": True,
                        "capturable": True}], lr=lr, weight_decay=0.01)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01, amsgrad=True,
                             maximize=True, fused=True)
    for k in range(1, 7):
        lr.fill_(1e-2 / k)
        ropt.param_groups[0]["lr"] = 1e-2 / k
        for m, o in ((a, opt), (ref, ropt)):
            o.zero_grad()
            loss_of(m, k).backward()
            o.step()
        for p, q in zip(a.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), k
    assert dict(opt._units[0].options) == dict(amsgrad=True, maximize=True, capturable=True)
    assert sorted(opt._units[0].scalars.tensors) == ["lr", "t"]
    # torch's layout, max_exp_avg_sq included, and back (into a fresh optimizer)
    sd, rsd = opt.state_dict(), ropt.state_dict()
    for i in rsd["state"]:
        for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            got, want = sd["state"][i][key], rsd["state"][i][key]
            assert float((got - want).abs().max() / want.abs().max()) < 1e-4, key
        assert float(sd["state"][i]["step"]) == float(rsd["state"][i]["step"]) == 6
    fresh = optim.AdamW([{"params": list(a.parameters()), "amsgrad": True}], lr=1e-2)
    fresh.load_state_dict(rsd)
    back = fresh.state_dict()
    for i in rsd["state"]:
        assert torch.equal(back["state"][i]["max_exp_avg_sq"], rsd["state"][i]["max_exp_avg_sq"])


def test_lamb_per_tensor_by_default(cpu_session):
    """optim.LAMB: a trust ratio per parameter tensor, or the group's."""
    for trust in ("tensor", "group"):
        a, ref = model(), model()
        opt = optim.LAMB([{"params": list(a.parameters()), "trust": trust}] if trust == "group"
                         else a.parameters(), lr=1e-2, weight_decay=0.01)
        params = list(ref.parameters())
        state = {p: (torch.zeros_like(p), torch.zeros_like(p)) for p in params}
        for k in range(1, 4):
            opt.zero_grad()
            loss_of(a, k).backward()
            opt.step()
            for p in params:
                p.grad = None
            loss_of(ref, k).backward()
            with torch.no_grad():
                us = []
                for p in params:
                    m, v = state[p]
                    m.mul_(0.9).add_(p.grad, alpha=0.1)
                    v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                    us.append((m / (1 - 0.9 ** k)) / ((v / (1 - 0.999 ** k)).sqrt() + 1e-6) +
                              0.01 * p)
                groups = [([p], [u]) for p, u in zip(params, us)] if trust == "tensor" else \
                    [(params, us)]
                for ps, vs in groups:
                    r1 = torch.sqrt(sum((p.double() ** 2).sum() for p in ps))
                    r2 = torch.sqrt(sum((u.double() ** 2).sum() for u in vs))
                    for p, u in zip(ps, vs):
                        p.sub_(1e-2 * float(r1 / r2) * u)
            for p, q in zip(a.parameters(), ref.parameters()):
                assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (trust, k)


def test_clip_grad_norm_refuses_what_it_cannot_do(cpu_session):
    a = model()
    opt = optim.AdamW([{"params": [a[0].weight, a[0].bias]}, {"params": [a[2].weight, a[2].bias]}])
    with pytest.raises(coconet.CocoError, match="lie in 2 parameter groups"):
        ct.clip_grad_norm_(a.parameters(), 1.0)
    with pytest.raises(ValueError, match="norm_type"):
        ct.clip_grad_norm_([a[0].weight, a[0].bias], 1.0, norm_type=1)
    other = torch.nn.Linear(2, 2)  # no coconet optimizer: torch's function
    other(torch.ones(1, 2)).sum().backward()
    assert float(ct.clip_grad_norm_(other.parameters(), 1e-3)) > 1e-3
    assert opt.param_groups[0].get("max_grad_norm") is None
