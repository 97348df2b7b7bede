"""test_optplan.py: coconet.torch.optim's bookkeeping that needs no torch
(coconet.optplan): flat layouts, the backward pass's order, units and
buckets, the launch order during the backward pass, the ranks' agreement
and its refusals, where each parameter's state lies over the ranks, and the
keys and cover of a sharded checkpoint (loading at another world size)."""
import os

import numpy as np
import pytest

import coconet
from coconet import optplan, programs
from coconet.optplan import Member, Unit


def test_layout():
    assert optplan.layout([3, 5, 1], 4) == ([0, 4, 12], 13)  # 16 bytes: 4 FP32
    assert optplan.layout([3, 5], 2) == ([0, 8], 13)  # 8 FP16
    assert optplan.layout([], 4) == ([], 0)


def test_full_order():
    # the hooks' first firings, duplicates and unknown keys dropped; the rest reversed
    assert optplan.full_order([5, 2, 5, 9], range(6)) == [5, 2, 4, 3, 1, 0]
    assert optplan.full_order([], [0, 1, 2]) == [2, 1, 0]


def _members(sizes, gi=0, step=0, dtype="FP32"):
    return [Member(k, gi, step, dtype, n) for k, n in sizes.items()]


def test_plan_one_unit_per_group_step_type():
    ms = _members({0: 40, 1: 40}) + _members({2: 8}, gi=1) + _members({3: 8}, step=4) \
        + _members({4: 8}, dtype="BF16")
    units = optplan.plan_units(ms, optplan.full_order([], range(5)))
    assert sorted(u.members for u in units) == [(1, 0), (2,), (3,), (4,)]
    assert {u.members: (u.gi, u.step, u.dtype) for u in units}[(1, 0)] == (0, 0, "FP32")
    # sorted by when their last member is ready: 4, 3, 2, then 1 0 (order 4 3 2 1 0)
    assert [u.members for u in units] == [(4,), (3,), (2,), (1, 0)]


def test_plan_buckets_in_hook_order():
    ms = _members({k: 100 for k in range(6)})
    order = [5, 3, 4, 1, 2, 0]  # as the hooks fired
    units = optplan.plan_units(ms, order, cap_bytes=250)
    assert [u.members for u in units] == [(5, 3, 4), (1, 2, 0)]
    units = optplan.plan_units(ms, order, cap_bytes=100)
    assert [u.members for u in units] == [(k,) for k in order]


def test_plan_interleaved_groups_and_kept():
    # decay and no-decay groups interleaved in the backward's order
    ms = _members({0: 100, 2: 100, 4: 100}) + _members({1: 4, 3: 4, 5: 4}, gi=1)
    order = [5, 4, 3, 2, 1, 0]
    units = optplan.plan_units(ms, order, cap_bytes=200)
    assert [(u.gi, u.members) for u in units] == [(0, (4, 2)), (1, (5, 3, 1)), (0, (0,))]
    kept = units[:1]
    again = optplan.plan_units([m for m in ms if m.key != 3], order, 200, keep=kept)
    assert again[0] is kept[0] and [u.members for u in again[1:]] == [(5, 1), (0,)]


def test_plan_errors():
    with pytest.raises(ValueError, match="not in the order"):
        optplan.plan_units(_members({0: 4, 1: 4}), [0])


def test_launcher_in_order():
    units = [Unit(0, 0, "FP32", (5, 3)), Unit(0, 0, "FP32", (4,)), Unit(0, 0, "FP32", (1, 0))]
    la = optplan.Launcher(units)
    assert la.ready(4) == []  # unit 1 is ready, but unit 0 is not started yet
    assert la.ready(5) == []
    assert la.ready(3) == [0, 1]
    assert la.ready(9) == []  # not planned (skipped this step)
    assert la.ready(0) == [] and la.ready(1) == [2]
    with pytest.raises(coconet.CocoError, match="parameter 3 was accumulated again after its "
                                                "bucket was stepped.*no_sync"):
        la.ready(3)
    la.reset()
    assert la.ready(5) == [] and la.ready(5) == []  # again before its unit starts: accumulation
    assert la.ready(3) == [0]


def test_agreement():
    keys = range(4)
    same = [optplan.agreement("step()", 1, keys, {0, 2}) for _ in range(3)]
    assert same[0] == [1, 1, 1, 0, 1, 0]
    optplan.check_agreement(same, list(keys))
    rows = [optplan.agreement("step()", 0, keys, {0, 2}),
            optplan.agreement("step()", 0, keys, {0}), optplan.agreement("step()", 0, keys, {0})]
    with pytest.raises(coconet.CocoError) as e:
        optplan.check_agreement(rows, list(keys), lambda k: "parameter %d (shape [7])" % k)
    assert "parameter 2 (shape [7]) has a gradient on ranks 0 and None on ranks 1, 2" in str(e.value)
    rows = [optplan.agreement("state_dict()", 0, keys, ()), optplan.agreement("step()", 0, keys, ())]
    with pytest.raises(coconet.CocoError) as e:
        optplan.check_agreement(rows, list(keys))
    msg = str(e.value)
    assert "state_dict() on ranks 0; step() on ranks 1" in msg
    assert "consolidate_state_dict(to=0)" in msg
    rows = [optplan.agreement("step()", 2, keys, ()), optplan.agreement("step()", 1, keys, ())]
    with pytest.raises(coconet.CocoError, match=r"started different numbers of buckets.*\(2, 1\)"):
        optplan.check_agreement(rows, list(keys))
    with pytest.raises(coconet.CocoError, match="parameter counts"):
        optplan.check_agreement([[1, 0, 1], [1, 0, 1, 1]], [0])


def test_slice_pieces():
    # members 3, 5, 2 over slices 4, 4, 2
    assert optplan.slice_pieces([3, 5, 2], [4, 4, 2]) == [
        [(0, 0, 0, 3), (1, 0, 3, 1)], [(1, 1, 0, 4)], [(2, 0, 0, 2)]]
    assert optplan.member_pieces([3, 5, 2], [4, 4, 2], 0) == {0: (0, 0, 3), 1: (0, 3, 1)}
    assert optplan.slice_pieces([2], [0, 2]) == [[], [(0, 0, 0, 2)]]  # an empty slice
    with pytest.raises(ValueError):
        optplan.slice_pieces([3], [2])


def test_slices_are_the_programs(tmp_path):
    """The paper schedule's slice of m on each rank is that rank's part of
    the members' concatenation, as slice_pieces says (run_cpu's view)."""
    counts, P = [30, 7, 64, 1], 3
    path = programs.write(programs.optimizer("adam", counts, "FP32"), "adam", str(tmp_path))
    run = coconet.load(path, ranks=P).schedule("paper")
    sizes = [int(np.prod(run.tensor_info("m", r).local_shape)) for r in range(P)]
    members = [np.arange(n, dtype=np.float32) + 1000 * k for k, n in enumerate(counts)]
    whole = np.concatenate(members)
    slices = [np.zeros(s, np.float32) for s in sizes]
    for r in range(P):
        for k, a, s, n in optplan.slice_pieces(counts, sizes)[r]:
            slices[r][s:s + n] = members[k][a:a + n]
    assert np.array_equal(np.concatenate(slices), whole)
    n = sum(counts)
    hp = dict(lr=0.01, t=1.0, beta1=0.9, beta2=0.99, eps=1e-6, wd=0.0, gscale=1.0 / P)
    _, new = run.run_cpu(dict(g=[np.zeros(n, np.float32)] * P, p=np.zeros(n, np.float32),
                              m=slices, v=[np.ones(s, np.float32) for s in sizes], **hp),
                         with_inputs=True)
    # zero gradients: each rank's m scaled by beta1, in the slices we laid out
    assert np.allclose(np.concatenate(new["m"]), 0.9 * whole)


def test_piece_keys_and_cover():
    k = optplan.piece_key("optim", 12, "exp_avg", 40, 90)
    assert k == "optim.state.12.exp_avg.40_90"
    assert optplan.parse_piece_key("optim", k) == (12, "exp_avg", 40, 90)
    assert optplan.parse_piece_key("optim", "optim.step.12") is None
    assert optplan.parse_piece_key("model", k) is None
    # saved at P = 3 (0..40, 40..90, 90..100); wanted at P = 2: 0..50 and 50..100
    saved = [(40, 90), (0, 40), (90, 100)]
    assert optplan.cover(saved, 0, 50) == [((0, 40), 0, 0, 40), ((40, 90), 0, 40, 10)]
    assert optplan.cover(saved, 50, 100) == [((40, 90), 10, 0, 40), ((90, 100), 0, 40, 10)]
    assert optplan.cover(saved, 5, 5) == []
    with pytest.raises(coconet.CocoError, match="lacks elements 40..100"):
        optplan.cover([(0, 40)], 0, 100)
    with pytest.raises(coconet.CocoError, match=r"lacks elements 0\.\.10 "):
        optplan.cover([(10, 20)], 0, 20)


def test_reshard_round_trip():
    """State laid out in slices at P = 3, saved as pieces per parameter, read
    back at P = 2 through cover: the same values."""
    counts = [30, 7, 64, 1]
    rng = np.random.default_rng(2)
    members = [rng.standard_normal(n) for n in counts]

    def sizes(P):
        n = sum(counts)
        return [n // P + (1 if r < n % P else 0) for r in range(P)]
    saved = {}
    for r in range(3):
        for k, (a, _, n) in optplan.member_pieces(counts, sizes(3), r).items():
            saved[(k, a, a + n)] = members[k][a:a + n]
    for r in range(2):
        mine = np.zeros(sizes(2)[r])
        for k, (a, s, n) in optplan.member_pieces(counts, sizes(2), r).items():
            have = [(x, y) for (kk, x, y) in saved if kk == k]
            for (x, y), src, dst, c in optplan.cover(have, a, a + n):
                mine[s + dst:s + dst + c] = saved[(k, x, y)][src:src + c]
        want = np.concatenate(members)[sum(sizes(2)[:r]):sum(sizes(2)[:r + 1])]
        assert np.array_equal(mine, want)


def test_torch_free():
    """optplan imports no torch (make test runs it without)."""
    with open(os.path.join(os.path.dirname(optplan.__file__), "optplan.py")) as f:
        assert "import torch" not in f.read()
