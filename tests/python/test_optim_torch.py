"""test_optim_torch.py: coconet.torch.optim's torch side on the CPU, one
rank, where torch is installed (skipped otherwise: `make test` has no
torch). The session, the arena and the compiled step are stood in for: a
"compiled" program is the real program (coconet.programs.optimizer, the
paper schedule) run by the CPU reference executor (run_cpu) on the tensors
bound to it, so that everything Python does around the step (groups, None
gradients, units, hooks and buckets, no_sync, state[p], checkpoints with
torch.optim.AdamW, masters) is checked against torch's optimizers. The GPU
checks of the same semantics: tests/gpu/torch_check.py."""
import os

import pytest

torch = pytest.importorskip("torch")

import coconet  # noqa: E402
import coconet.torch as ct  # noqa: E402
from coconet.torch import optim  # noqa: E402

import gloo_ranks  # noqa: E402
import optim_standins  # noqa: E402
from optim_standins import model, twin, loss_of, train, close, groups  # noqa: E402


@pytest.fixture(autouse=True)
def standins(monkeypatch, tmp_path):
    monkeypatch.setenv("COCONET_CACHE", str(tmp_path / "cache"))
    return optim_standins.install(monkeypatch.setattr)


# ---- torch's semantics ----

def test_adamw_defaults_and_signature():
    a = model()
    opt = optim.AdamW(a.parameters(), lr=1e-2, foreach=True, fused=True)
    assert opt.defaults["weight_decay"] == 0.01 and opt.defaults["decoupled_weight_decay"]
    b = twin(a)
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, foreach=False)
    train(a, opt, 6)
    train(b, ref, 6)
    close(a, b)
    assert optim.Adam(model().parameters()).defaults["weight_decay"] == 0


def test_adam_plain_matches_torch():
    a = model()
    b = twin(a)
    train(a, optim.Adam(a.parameters(), lr=1e-2), 5)
    train(b, torch.optim.Adam(b.parameters(), lr=1e-2, foreach=False), 5)
    close(a, b)


@pytest.mark.parametrize("kw", [dict(weight_decay=0.1), dict(amsgrad=True, weight_decay=0.1),
                                dict(maximize=True, amsgrad=True)],
                         ids=["l2", "l2-amsgrad", "maximize-amsgrad"])
def test_adam_variants_match_torch(kw):
    """Adam's L2 decay, amsgrad (its state max_exp_avg_sq, in torch's
    layout) and maximize: each the unit's program variant."""
    a = model()
    b = twin(a)
    opt = optim.Adam(a.parameters(), lr=1e-2, **kw)
    ref = torch.optim.Adam(b.parameters(), lr=1e-2, foreach=False, **kw)
    train(a, opt, 5)
    train(b, ref, 5)
    close(a, b)
    assert ("decay", "l2") in opt._units[0].options or "weight_decay" not in kw
    if kw.get("amsgrad"):
        sd, rsd = opt.state_dict(), ref.state_dict()
        for i in rsd["state"]:
            assert torch.allclose(sd["state"][i]["max_exp_avg_sq"],
                                  rsd["state"][i]["max_exp_avg_sq"], rtol=1e-4, atol=1e-12)


def per_param(m):
    return [{"params": [p]} for p in m.parameters()]


@pytest.mark.parametrize("split,inject", [("one", {4: "loss"}), ("each", {3: "param", 6: "loss"})],
                         ids=["one-group-overflow", "group-per-param-inf"])
def test_gradscaler_overlap_equals_plain(split, inject):
    """A GradScaler's loop with overlap=True (buckets stepped during the
    backward pass, reading the scaler's scale) against overlap=False, bit
    for bit: parameters, scales and skipped steps. Each unit skips on its
    own gradient: an overflow of the loss skips every unit, an Inf in one
    parameter's gradient only its unit (one parameter a group here, so
    that the units of both modes are the same) while the others step."""
    a = model()
    b = twin(a)
    params = per_param if split == "each" else (lambda m: m.parameters())
    oa = optim.AdamW(params(a), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20)
    ob = optim.AdamW(params(b), lr=1e-2)
    sa = ct.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)
    sb = ct.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)
    before = [p.detach().clone() for p in a.parameters()]
    scales = optim_standins.amp_train(a, oa, sa, 8, inject)
    assert scales == optim_standins.amp_train(b, ob, sb, 8, inject)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert len(oa._units) > 2 and len(oa._launched) == 0
    assert all(dict(u.options).get("amp") for u in oa._units)
    skipped = sorted(inject)
    assert all(scales[k - 1] == scales[k - 2] / 2 for k in skipped)  # halved where skipped
    sd, sdb = oa.state_dict()["state"], ob.state_dict()["state"]  # the device's step counts
    steps = [int(sd[i]["step"]) for i in sorted(sd)]
    assert steps == [int(sdb[i]["step"]) for i in sorted(sdb)]
    want = [8 - sum(1 for k in skipped if inject[k] == "loss" or i == 2) for i in range(len(steps))]
    assert steps == want, (steps, want)
    assert all(not torch.equal(p, q) for p, q in zip(a.parameters(), before))


def test_gradscaler_overlap_refusals():
    """With overlap=True: torch's own GradScaler (it gives the scale to
    step() only, after the buckets started), unscale_ (the buckets read the
    gradients before it), and a step scaled otherwise than the buckets of
    its backward pass."""
    a = model()
    opt = optim.AdamW(a.parameters(), overlap=True, bucket_mb=200 / 2 ** 20)
    torch_scaler = torch.amp.GradScaler("cpu")
    opt.zero_grad()
    torch_scaler.scale(loss_of(a, 1)).backward()
    with pytest.raises(coconet.CocoError, match="must be coconet.torch.GradScaler"):
        torch_scaler.step(opt)
    scaler = ct.GradScaler("cpu")
    with pytest.raises(coconet.CocoError, match="unscale_: the optimizer steps with overlap=True"):
        scaler.unscale_(opt)
    optim_standins.amp_train(a, opt, scaler, 2)
    opt.zero_grad()
    loss_of(a, 3).backward()  # the buckets start scaled, as the last step was
    assert len(opt._launched) == len(opt._units)
    with pytest.raises(coconet.CocoError, match="were scaled by a GradScaler, but this step is "
                                                "not scaled"):
        opt.step()


def test_differentiable_refused():
    with pytest.raises(coconet.CocoError, match="differentiable=True is refused"):
        optim.AdamW(model().parameters(), differentiable=True)


def test_groups_and_add_param_group_and_schedulers():
    a = model()
    b = twin(a)
    ga, gb = groups(a), groups(b)
    opt = optim.AdamW(ga[:1], lr=1e-2)
    ref = torch.optim.AdamW(gb[:1], lr=1e-2, foreach=False)
    sa = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)
    sb = torch.optim.lr_scheduler.CosineAnnealingLR(ref, 10)
    train(a, opt, 3, sa)
    train(b, ref, 3, sb)
    opt.add_param_group(ga[1])
    ref.add_param_group(gb[1])
    train(a, opt, 4, sa)
    train(b, ref, 4, sb)
    close(a, b)
    assert len({u.gi for u in opt._units}) == 2


def test_onecycle_writes_betas():
    a = model()
    b = twin(a)
    opt = optim.AdamW(a.parameters(), lr=1e-2)
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, foreach=False)
    sa = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-2, total_steps=20)
    sb = torch.optim.lr_scheduler.OneCycleLR(ref, max_lr=3e-2, total_steps=20)
    train(a, opt, 8, sa)
    train(b, ref, 8, sb)
    assert opt.param_groups[0]["betas"][0] != 0.9  # OneCycleLR cycles beta1
    close(a, b)


def test_none_grad_skipped_freeze_unfreeze():
    """A parameter frozen mid-run keeps its state and step; unfrozen, it is
    stepped with its own step count (its own program), as torch does."""
    a = model()
    b = twin(a)
    opt = optim.AdamW(a.parameters(), lr=1e-2)
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, foreach=False)

    def freeze(m):
        def at(step):
            m[2].weight.requires_grad_(not 3 <= step <= 5)
        return at
    train(a, opt, 8, before=freeze(a))
    train(b, ref, 8, before=freeze(b))
    close(a, b)
    steps = {int(opt.state[p]["step"]) for p in a.parameters()}
    assert steps == {8, 5}
    assert int(opt.state[a[2].weight]["step"]) == 5
    assert len(opt._units) == 2  # the same group, two step counts


def test_zero_grad_follows_torch():
    a = model()
    opt = optim.AdamW(a.parameters())
    loss_of(a, 1).backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in a.parameters())
    grads = {id(p): p.grad for p in a.parameters()}
    loss_of(a, 1).backward()
    assert all(p.grad is grads[id(p)] for p in a.parameters())  # accumulated in place
    opt.zero_grad()
    assert all(p.grad is None for p in a.parameters())
    loss_of(a, 2).backward()  # new tensors, copied into the arena by the hooks
    assert all(p.grad is opt._grads[k] for k, p in enumerate(a.parameters()))


def test_state_populated():
    a = model()
    opt = optim.AdamW(a.parameters())
    train(a, opt, 2)
    for p in a.parameters():
        s = opt.state[p]
        assert float(s["step"]) == 2 and s["exp_avg"].shape == p.shape
        assert s["exp_avg_sq"].shape == p.shape


# ---- checkpoints ----

def test_state_dict_round_trip_with_torch():
    a = model()
    b = twin(a)
    opt = optim.AdamW(groups(a), lr=1e-2)
    ref = torch.optim.AdamW(groups(b), lr=1e-2, foreach=False)
    train(a, opt, 3)
    train(b, ref, 3)
    sd, rsd = opt.state_dict(), ref.state_dict()
    assert sd["state"].keys() == rsd["state"].keys()
    for i in rsd["state"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.allclose(sd["state"][i][k], rsd["state"][i][k], rtol=1e-5, atol=1e-7)
    # ours into torch's, torch's into ours: both go on alike
    c, d = twin(a), twin(a)
    ref2 = torch.optim.AdamW(groups(c), lr=1e-2, foreach=False)
    ref2.load_state_dict(sd)
    opt2 = optim.AdamW(groups(d), lr=1e-2)
    opt2.load_state_dict(rsd)
    train(c, ref2, 3)
    train(d, opt2, 3)
    train(a, opt, 3)
    close(a, c)
    close(a, d)


def test_consolidate_and_load_again():
    a = model()
    opt = optim.AdamW(a.parameters())
    train(a, opt, 2)
    opt.consolidate_state_dict(to=0)
    sd = opt.state_dict()
    sd2 = opt.state_dict()  # the consolidated one was taken: this one is gathered again
    assert all(torch.equal(sd["state"][i]["exp_avg"], sd2["state"][i]["exp_avg"])
               for i in sd["state"])
    opt.load_state_dict(sd)
    assert opt._units == [] and len(opt._parked) == len(sd["state"])
    train(a, opt, 1)
    assert float(opt.state[next(a.parameters())]["step"]) == 3


def test_bf16_masters_refreshed():
    a = model(dtype=torch.bfloat16)
    opt = optim.AdamW(a.parameters(), lr=1e-2)
    train(a, opt, 2)
    sd = opt.state_dict()
    assert all(s["master_param"].dtype == torch.float32 for s in sd["state"].values())
    new = model(seed=9, dtype=torch.bfloat16)
    a.load_state_dict(new.state_dict())  # in place: the weights' version moves
    for k, p in enumerate(a.parameters()):
        assert p._version != opt._versions[k]
    opt.zero_grad()
    loss_of(a, 3).backward()
    opt.step()
    m = opt._masters[0]
    assert (m - next(new.parameters()).float().reshape(-1)).abs().max() < 0.1  # from the new


def test_dcp_sharded_round_trip(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    a = model()
    opt = optim.AdamW(a.parameters(), lr=1e-2)
    train(a, opt, 3)
    sd = opt.state_dict()
    dcp.save(opt.sharded_state_dict(), checkpoint_id=str(tmp_path / "ck"))
    b = twin(a)
    opt2 = optim.AdamW(b.parameters(), lr=5.0)
    opt2.load_sharded_state_dict(str(tmp_path / "ck"))
    assert opt2.param_groups[0]["lr"] == 1e-2
    sd2 = opt2.state_dict()
    for i in sd["state"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sd["state"][i][k], sd2["state"][i][k])


# ---- overlapped with the backward pass ----

def test_overlap_equals_plain_and_buckets():
    a = model()
    b = twin(a)
    opt = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20)
    ref = optim.AdamW(b.parameters(), lr=1e-2)
    train(a, opt, 4)
    train(b, ref, 4)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert len(opt._units) > 2  # buckets of about 200 bytes
    order = [k for u in opt._units for k in u.keys]
    assert order[0] == len(list(a.parameters())) - 1  # the last layer's finish first


def test_overlap_steps_during_backward_and_no_sync():
    a = model()
    b = twin(a)
    opt = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20)
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, foreach=False)
    train(a, opt, 1)
    train(b, ref, 1)
    for step in range(2, 5):  # two micro-batches a step
        opt.zero_grad()
        ref.zero_grad()
        with opt.no_sync():
            loss_of(a, step).backward()
        assert not opt._launched
        loss_of(a, 100 + step).backward()
        assert len(opt._launched) == len(opt._units)  # all started during the backward
        opt.step()
        loss_of(b, step).backward()
        loss_of(b, 100 + step).backward()
        ref.step()
    close(a, b)
    opt.zero_grad()
    loss_of(a, 7).backward()
    with pytest.raises(coconet.CocoError, match="accumulated again after its bucket"):
        loss_of(a, 8).backward()


def test_overlap_param_gather_refusals():
    with pytest.raises(coconet.CocoError, match="needs overlap=True"):
        optim.AdamW(model().parameters(), overlap_param_gather=True)
    with pytest.raises(TypeError, match="overlap_param_gather"):  # LAMB has no such argument
        optim.LAMB(model().parameters(), overlap=True, overlap_param_gather=True)


def test_lamb_takes_no_buckets():
    opt = optim.LAMB(model().parameters(), overlap=True)
    assert opt._cap is None


# ---- several ranks: processes joined by gloo (optim_ranks.py) ----

def ranks(scenario, P, d, timeout_s=None):
    """Runs optim_ranks.py's scenario at P ranks; each rank's result line."""
    env = dict(os.environ, COCONET_OPTIM_TIMEOUT=str(timeout_s or 60))
    return gloo_ranks.spawn("optim_ranks.py", scenario, P, d, env)


def test_ranks_train_checkpoint_and_reshard(tmp_path):
    got = ranks("train", 2, tmp_path)
    assert all(g.startswith("OK") for g in got), got
    for P in (3, 1):  # the sharded checkpoint at other world sizes
        got = ranks("load", P, tmp_path)
        assert all(g.startswith("OK") for g in got), got


def test_ranks_overlap(tmp_path):
    got = ranks("overlap", 2, tmp_path)
    assert all(g.startswith("OK") for g in got), got


def test_ranks_gradscaler_overlap(tmp_path):
    got = ranks("amp_overlap", 2, tmp_path)
    assert all(g.startswith("OK") for g in got), got


@pytest.mark.parametrize("P", [1, 2])
def test_ranks_overlap_param_gather(tmp_path, P):
    """The all-gather deferred to the next forward (at P = 1 nothing is
    deferred: the scenario's checks of deferral are P > 1's)."""
    got = ranks("pgather", P, tmp_path)
    assert all(g.startswith("OK") for g in got), got


def test_ranks_refusals(tmp_path):
    got = ranks("disagree", 2, tmp_path)
    for g in got:
        assert "parameter 2 (group 0, shape [8, 8]) has a gradient on ranks 0 and None on " \
               "ranks 1" in g, g
    got = ranks("rank0_only", 2, tmp_path)
    for g in got:
        assert "state_dict() on ranks 0; step() on ranks 1" in g, g
    got = ranks("rank0_alone", 2, tmp_path, timeout_s=3)
    assert "state_dict() is collective, but not every rank" in got[0], got[0]


def test_a_new_optimizer_takes_the_parameters_over():
    """Recreating the optimizer (after a checkpoint, say): the old one's
    hooks leave the gradients to the new one, and the new one trains as a
    fresh torch optimizer does."""
    a = model()
    b = twin(a)
    old = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20)
    train(a, old, 2)
    train(b, torch.optim.AdamW(b.parameters(), lr=1e-2, foreach=False), 2)
    new = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20)
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, foreach=False)
    train(a, new, 3)
    train(b, ref, 3)
    close(a, b)
    assert all(p.grad is new._grads[k] for k, p in enumerate(a.parameters()))
    assert not old._launched


def test_clipping_refused_over_several_programs():
    a = model()
    opt = optim.AdamW(a.parameters(), overlap=True, bucket_mb=200 / 2 ** 20)
    opt.param_groups[0]["max_grad_norm"] = 1.0  # as coconet.torch.clip_grad_norm_ sets it
    opt.zero_grad()
    loss_of(a, 1).backward()
    with pytest.raises(coconet.CocoError, match="group 0 clips by its global norm .* cut into "
                                                "[0-9]+ programs \\(buckets"):
        opt.step()


def test_started_bucket_kept_when_settings_change():
    """A bucket stepped during the backward pass is not stepped again at
    step() when the group's settings ask for another program meanwhile
    (the next step takes the new one)."""
    a = model()
    opt = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20)
    train(a, opt, 1)
    opt.zero_grad()
    loss_of(a, 2).backward()
    assert len(opt._launched) == len(opt._units)
    opt.param_groups[0]["foreach"] = True  # accepted, no other program: nothing changes
    opt._options = lambda pg, check=False: (("x", 1),)  # as if a setting chose a variant
    calls = optim_standins.Compiled.calls
    opt.step()
    assert optim_standins.Compiled.calls == calls  # nothing stepped twice
    assert all(float(opt.state[p]["step"]) == 2 for p in a.parameters())
