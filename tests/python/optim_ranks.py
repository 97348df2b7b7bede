"""optim_ranks.py: one rank of coconet.torch.optim on the CPU stand-ins
(optim_standins.py), joined to the others by gloo (gloo_ranks.py); run by
test_optim_torch.py as P processes:

    python3 optim_ranks.py SCENARIO RANK P DIR

Writes DIR/result.RANK: "OK" and a detail, or "ERROR" and the message of
the exception the scenario raised (some scenarios expect one)."""
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coconet  # noqa: E402
import coconet.torch  # noqa: E402
import gloo_ranks  # noqa: E402
import optim_standins as T  # noqa: E402
from coconet.torch import optim  # noqa: E402


def reference_step(ref, ropt, m, step, rank, P):
    """DDP's mean of the ranks' gradients, then torch's AdamW."""
    ropt.zero_grad()
    T.loss_of(m, step, rank).backward()
    for p in m.parameters():
        dist.all_reduce(p.grad)
        p.grad.div_(P)
    ropt.step()


def train(rank, P, d):
    """Against DDP-style averaging + torch.optim.AdamW; state[p] as this rank
    holds it; state_dict and consolidate_state_dict against torch's; a
    sharded checkpoint for other world sizes to load."""
    a = T.model()
    b = T.twin(a)
    opt = optim.AdamW(T.groups(a), lr=1e-2)
    ropt = torch.optim.AdamW(T.groups(b), lr=1e-2, foreach=False)
    for step in range(1, 5):
        opt.zero_grad()
        T.loss_of(a, step, rank).backward()
        opt.step()
        reference_step(b, ropt, b, step, rank, P)
    T.close(a, b)
    w = a[0].weight
    s = opt.state[w]
    lo, hi = s["local_range"]
    assert torch.equal(s["exp_avg_local"], opt.state_dict()["state"][0]["exp_avg"].reshape(-1)[lo:hi])
    sd, rsd = opt.state_dict(), ropt.state_dict()
    for i in rsd["state"]:
        assert torch.allclose(sd["state"][i]["exp_avg"], rsd["state"][i]["exp_avg"], rtol=1e-5,
                              atol=1e-7)
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        cd = opt.state_dict()
        assert all(torch.equal(cd["state"][i]["exp_avg_sq"], sd["state"][i]["exp_avg_sq"])
                   for i in sd["state"])
        torch.save(sd, os.path.join(d, "full.pt"))
    import torch.distributed.checkpoint as dcp
    dcp.save(opt.sharded_state_dict(), checkpoint_id=os.path.join(d, "ck"))
    return "local range %d..%d of %d" % (lo, hi, w.numel())


def load(rank, P, d):
    """A sharded checkpoint saved at another world size, against its full
    state_dict; then a step, the same on every rank."""
    a = T.model()
    opt = optim.AdamW(T.groups(a), lr=5.0)
    opt.load_sharded_state_dict(os.path.join(d, "ck"))
    sd = opt.state_dict()
    full = torch.load(os.path.join(d, "full.pt"))
    for i in full["state"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sd["state"][i][k], full["state"][i][k]), (i, k)
    assert opt.param_groups[0]["lr"] == 1e-2
    return "%d parameters' state equal" % len(full["state"])


def overlap(rank, P, d):
    """The overlapped mode with two micro-batches a step against the plain
    mode, bit for bit."""
    a = T.model()
    b = T.twin(a)
    oa = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=300 / 2 ** 20)
    ob = optim.AdamW(b.parameters(), lr=1e-2)
    for step in range(1, 5):
        for m, o in ((a, oa), (b, ob)):
            o.zero_grad(set_to_none=False)
            with o.no_sync():
                T.loss_of(m, step, rank).backward()
            T.loss_of(m, step + 50, rank).backward()
            o.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    return "%d buckets" % len(oa._units)


def amp_overlap(rank, P, d):
    """A GradScaler's loop with overlap=True against overlap=False, bit for
    bit: an Inf in one parameter's gradient on rank 0 only (its unit skips
    on every rank; one parameter a group, so that both modes' units are
    the same), and the loss of rank 1 only overflowing (every unit skips);
    the scales the same on every rank and in both modes."""
    a = T.model()
    b = T.twin(a)
    oa = optim.AdamW([{"params": [p]} for p in a.parameters()], lr=1e-2, overlap=True,
                     bucket_mb=200 / 2 ** 20)
    ob = optim.AdamW([{"params": [p]} for p in b.parameters()], lr=1e-2)
    inject = {3: "param"} if rank == 0 else {6: "loss"}
    scales = [T.amp_train(m, o, coconet.torch.GradScaler("cpu", init_scale=2.0 ** 8,
                                                         growth_interval=3), 8, inject, rank)
              for m, o in ((a, oa), (b, ob))]
    assert scales[0] == scales[1], scales
    every = [None] * P
    dist.all_gather_object(every, scales[0])
    assert all(s == scales[0] for s in every), every
    assert scales[0][2] == scales[0][1] / 2 and scales[0][5] == scales[0][4] / 2, scales
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    steps = [int(sa[i]["step"]) for i in sorted(sa)]
    assert steps == [int(sb[i]["step"]) for i in sorted(sb)]
    assert steps == [6 if i == 2 else 7 for i in range(len(steps))], steps
    return "%d buckets; scales %s" % (len(oa._units), scales[0])


def pgather(rank, P, d):
    """overlap_param_gather=True against the plain mode, two micro-batches
    a step: the parameters keep their old values after step() until a
    forward pre-hook gathers them, each module's are the plain mode's at
    its forward, a step with no forward between gathers first, and the
    parameters and state_dict end bit for bit the plain mode's."""
    a = T.model()
    b = T.twin(a)
    oa = optim.AdamW(a.parameters(), lr=1e-2, overlap=True, bucket_mb=200 / 2 ** 20,
                     overlap_param_gather=True)
    ob = optim.AdamW(b.parameters(), lr=1e-2)
    twin_of = dict(zip(a.modules(), b.modules()))
    seen = []

    def check(module, args):  # after the optimizer's global hook: gathered
        for p, q in zip(module.parameters(recurse=False), twin_of[module].parameters(recurse=False)):
            assert torch.equal(p, q), (type(module).__name__, p, q)
        seen.append(module)

    for m in a.modules():
        m.register_forward_pre_hook(check)
    stale = 0
    for step in range(1, 6):
        for m, o in ((a, oa), (b, ob)):  # a's forwards see b's parameters of the last step
            o.zero_grad(set_to_none=False)
            with o.no_sync():
                T.loss_of(m, step, rank).backward()
            T.loss_of(m, step + 50, rank).backward()
            o.step()
        # every bucket's gather deferred (at P = 1 there is nothing to gather)
        assert len(oa._pending) == (len(oa._units) if P > 1 else 0)
        stale += not all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert stale == (5 if P > 1 else 0) and len(oa._units) > 2
    if P > 1:
        try:
            a.state_dict()
            raise AssertionError("model.state_dict() with gathers owed was not refused")
        except coconet.CocoError as e:
            assert "gather_params() on every rank first" in str(e), e
    for m, o in ((b, ob), (a, oa)):  # a step with no forward between: gathers first
        o.step()
    assert len(oa._pending) == (len(oa._units) if P > 1 else 0)
    sa, sb = oa.state_dict(), ob.state_dict()  # gathers the parameters
    assert not oa._pending
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    for i in sb["state"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa["state"][i][k], sb["state"][i][k]), (i, k)
    assert set(type(m).__name__ for m in seen) >= {"Linear", "LayerNorm"}
    return "%d buckets, %d module forwards checked" % (len(oa._units), len(seen))


def disagree(rank, P, d):
    a = T.model()
    opt = optim.AdamW(a.parameters())
    T.train(a, opt, 1, rank=rank)
    a[2].weight.requires_grad_(rank == 0)
    T.train(a, opt, 1, rank=rank)


def rank0_only(rank, P, d):
    a = T.model()
    opt = optim.AdamW(a.parameters())
    T.train(a, opt, 1, rank=rank)
    if rank == 0:
        opt.state_dict()
    T.train(a, opt, 1, rank=rank, first=2)


def rank0_alone(rank, P, d):
    a = T.model()
    opt = optim.AdamW(a.parameters())
    T.train(a, opt, 1, rank=rank)
    if rank == 0:
        opt.state_dict()
    else:
        time.sleep(2 * float(os.environ["COCONET_OPTIM_TIMEOUT"]))


def compiled(rank, P, d):
    """The step compiled (aot_eager and inductor, fullgraph=True) against
    the eager one, bit for bit (optim_compile_cases.py)."""
    import optim_compile_cases as K

    def make():
        m = T.model()
        return m, optim.AdamW(T.groups(m), lr=1e-2)
    want = K.train(make, lambda m, o: K.step_apart(m, o, None), rank=rank)
    for backend in ("aot_eager", "inductor"):
        got = K.train(make, lambda m, o: K.step_apart(m, o, backend), rank=rank)
        assert K.differ(want, got) == [], backend
    return "compiled equals eager"


if __name__ == "__main__":
    gloo_ranks.serve(globals(), T.install)
