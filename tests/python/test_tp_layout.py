"""coconet.tp_layout: the tensor-parallel layers' torch-free rules (slices
of Megatron's layouts, checkpoints in and out at other sizes, program sizes
and default schedules, Dropout's masks across ranks) on NumPy arrays and
the CPU reference."""
import numpy as np
import pytest

import coconet
from coconet import programs
from coconet import tp_layout as L
from coconet import tp_programs as tp


def test_partition_dims_are_megatrons():
    assert L.partition_dim("column", "weight") == 0  # [out/P, in]
    assert L.partition_dim("column", "bias") == 0
    assert L.partition_dim("row", "weight") == 1  # [out, in/P]
    assert L.partition_dim("row", "bias") is None
    with pytest.raises(ValueError, match="parameter 'gamma' of a 'row' layer"):
        L.partition_dim("row", "gamma")


def test_shard_and_join_round_trip():
    w = np.arange(8 * 6).reshape(8, 6)
    col = [L.shard(w, "column", "weight", r, 2) for r in range(2)]
    assert np.array_equal(col[1], w[4:])
    row = [L.shard(w, "row", "weight", r, 3) for r in range(3)]
    assert np.array_equal(row[2], w[:, 4:])
    assert np.array_equal(L.join(row, "row", "weight", np.concatenate), w)
    b = np.arange(8)
    assert L.shard(b, "row", "bias", 1, 2) is b


def test_shard_refuses_uneven():
    with pytest.raises(ValueError, match="column's weight .* of 6 is not a multiple of the 4"):
        L.shard(np.zeros((6, 2)), "column", "weight", 0, 4)
    with pytest.raises(ValueError, match="rank 2 of 2"):
        L.bounds(4, 2, 2)


@pytest.mark.parametrize("saved,here", [(1, 2), (2, 4), (4, 2), (2, 1), (3, 3)])
@pytest.mark.parametrize("kind", L.KINDS)
def test_megatron_checkpoints_at_other_sizes(kind, saved, here):
    w = np.random.default_rng(1).standard_normal((12, 24))
    megatron = [L.shard(w, kind, "weight", r, saved) for r in range(saved)]
    mine = [L.from_megatron(megatron, kind, "weight", r, here, np.concatenate)
            for r in range(here)]
    assert all(np.array_equal(m, L.shard(w, kind, "weight", r, here))
               for r, m in enumerate(mine))
    back = L.to_megatron(mine, kind, "weight", saved, np.concatenate)
    assert all(np.array_equal(a, b) for a, b in zip(back, megatron))
    assert np.array_equal(L.from_megatron(w, kind, "weight", 0, 1, np.concatenate), w)


def test_program_sizes_and_checks():
    assert L.program_sizes("column", 10, 16, 48) == {"T": 10, "H": 16, "F": 48}
    assert L.program_sizes("row", 10, 48, 16) == {"T": 10, "H": 16, "F": 48}
    L.check_sizes("row", {"T": 10, "H": 16, "F": 48}, 4, False)
    with pytest.raises(ValueError, match="10 tokens .* not a multiple of the 4 ranks"):
        L.check_sizes("row", {"T": 10, "H": 16, "F": 48}, 4, True)
    with pytest.raises(ValueError, match="sliced width 48 is not a multiple of the 5"):
        L.check_sizes("column", {"T": 10, "H": 16, "F": 48}, 5, False)
    with pytest.raises(ValueError, match="layer kind 'conv'"):
        L.program_sizes("conv", 1, 1, 1)


@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("direction", tp.DIRECTIONS)
def test_default_schedules_exist(tmp_path, direction, sp):
    """Each default names a schedule its program has, or is the program."""
    texts = {"column": tp.column_parallel(direction, "FP32", sp),
             "row": tp.row_parallel(direction, "FP32", sp),
             "norm": tp.norm_after_row_parallel(direction, "FP32", "layernorm", 0.1)}
    for kind, text in texts.items():
        prog = coconet.load(programs.write(text, kind, str(tmp_path)), ranks=2)
        name = L.default_schedule(kind, direction, sp, prog.schedules)
        assert name == "program" or name in prog.schedules
        if (kind, direction, sp) in L.DEFAULT_SCHEDULES:
            assert name != "program", (kind, direction, sp)


DROPOUT = """Size T = 8, H = 6;
Tensor a(FP32, [T,H], Replicated, WORLD);
Tensor s(FP32, [T,H], Sliced(0), WORLD, RANK);
Var ya = Dropout(a, 0.5);
Var ys = Dropout(s, 0.5);
Execute masks({a, s}, {ya, ys});
"""


@pytest.mark.parametrize("seed", [1, 12345])
def test_keep_mask_is_the_reference_executors(tmp_path, seed):
    """keep_mask matches run_cpu's Dropout; a Replicated value's mask is the
    same on every rank, a Sliced value's differs between the slices."""
    prog = coconet.load(programs.write(DROPOUT, "masks", str(tmp_path)), ranks=2)
    ones = np.ones((8, 6))
    out = prog.run_cpu({"a": ones, "s": [ones[:4], ones[4:]]}, seed=seed)
    assert np.array_equal(out["ya"] != 0, np.reshape(L.keep_mask(seed, 0, 48, 0.5), (8, 6)))
    for r in range(2):
        want = np.reshape(L.keep_mask(seed, 1, 24, 0.5, start=24 * r), (4, 6))
        assert np.array_equal(out["ys"][r] != 0, want)
    assert not np.array_equal(out["ys"][0] != 0, out["ys"][1] != 0)
    assert L.mask_agrees_across_ranks("Replicated") and L.mask_agrees_across_ranks("Local")
    assert not L.mask_agrees_across_ranks("Sliced(0)")


def test_seed_from_draw_is_never_zero():
    assert L.seed_from_draw(0) == 1
    assert L.seed_from_draw((1 << L.SEED_BITS) - 1) == 1
    assert 0 < L.seed_from_draw((1 << L.SEED_BITS) - 2) < 1 << L.SEED_BITS


def test_program_choice():
    text = tp.row_parallel("forward", "FP16", True)
    assert L.schedules_in(text) == ["ol"]
    assert L.program_choice("row", "forward", True, text) == ("row_forward", "ol")
    assert L.program_choice("row", "forward", True, text, "program") == ("row_forward", "program")
    bwd = tp.column_parallel("backward", "FP16", False)
    assert L.program_choice("column", "backward", False, bwd) == ("column_backward", "program")
    # one rank: nothing to overlap, the schedule without the overlap
    assert L.program_choice("row", "forward", True, text, ranks=1) == ("row_forward", "program")
    assert L.program_choice("row", "forward", True, text, ranks=2) == ("row_forward", "ol")
