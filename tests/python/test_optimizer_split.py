"""test_optimizer_split.py: the fused step cut in two for a deferred
all-gather (coconet.programs.optimizer_rs, the reduce-scatter and step of
each rank's slice, and param_gather, the slices gathered into every rank's
parameters) on the CPU reference executor at P = 1, 2, 3, 4 and 8: the two
in a row give bit for bit the fused program's parameters, 16-bit weights
and state (coconet.programs.optimizer under `paper`).

Run by tests/groups/75-python.sh (pytest, from the checkout after `make`)."""
import numpy as np
import pytest

import coconet
from coconet import programs

COUNTS = [30, 7, 64, 1]  # 102 elements: padded at P = 4 and 8, not at 1, 2, 3
HP = dict(lr=0.01, t=3.0, beta1=0.9, beta2=0.99, eps=1e-6, wd=0.05)
VARIANTS = [dict(), dict(decay="l2", amsgrad=True, maximize=True), dict(capturable=True)]


def load(tmp_path, text, name, P, schedule):
    prog = coconet.load(programs.write(text, name, str(tmp_path)), ranks=P)
    return prog.schedule(schedule) if schedule else prog


def data(P, dtype, names):
    """Every rank's gradient, the parameters (16-bit ones their rounding)
    and the state, drawn once."""
    rng = np.random.default_rng(11 + P)
    n = sum(COUNTS)
    cast = np.float16 if dtype == "FP16" else np.float32
    g = [rng.standard_normal(n).astype(cast).astype(np.float32) for _ in range(P)]
    p = rng.standard_normal(n).astype(np.float32)
    state = {"m": (rng.standard_normal(n) * 0.1).astype(np.float32),
             "v": (rng.random(n) * 0.1).astype(np.float32)}
    state["vm"] = (state["v"] + rng.random(n) * 0.05).astype(np.float32)
    return g, p, {k: state[k] for k in names}


def slices(run, name, P, x, fill=0.0):
    """x cut into the ranks' slices of `name` as the run holds them (the
    padded programs' last slices filled with `fill`)."""
    sizes = [run.tensor_info(name, r).local_shape[0] for r in range(P)]
    x = np.concatenate([x, np.full(sum(sizes) - len(x), fill, np.float32)])
    cut = np.cumsum([0] + sizes)
    return [x[cut[r]:cut[r + 1]] for r in range(P)]


def scalars(io, P):
    out = dict(HP, gscale=1.0 / P)
    return {k: v for k, v in out.items() if k in io["device"] or k in io["scalars"]}


def fused(tmp_path, P, dtype, o, g, p, state):
    run = load(tmp_path, programs.optimizer("adam", COUNTS, dtype, **o), "adam", P, "paper")
    io = programs.step_inputs("adam", dtype, **o)
    inputs = dict(g=g, p=p, **scalars(io, P))
    if dtype != "FP32":
        inputs["w"] = p
    inputs.update({k: slices(run, k, P, x) for k, x in state.items()})
    out, new = run.run_cpu(inputs, with_inputs=True)
    return out, {k: np.concatenate(new[k]) for k in state}


def split(tmp_path, P, dtype, o, g, p, state):
    """optimizer_rs, then param_gather into parameters that hold junk."""
    c, pad = programs.slice_layout(COUNTS, P)
    run = load(tmp_path, programs.optimizer_rs("adam", COUNTS, dtype, P, **o), "adam_rs", P,
               "paper")
    io = programs.step_inputs("adam", dtype, **o)
    junk = np.full(pad, np.nan, np.float32)
    inputs = dict(g=[np.concatenate([x, np.zeros(pad, np.float32)]) for x in g],
                  p=np.concatenate([p, junk]), **scalars(io, P))
    inputs.update({k: slices(run, k, P, x) for k, x in state.items()})
    out, new = run.run_cpu(inputs, with_inputs=True)
    assert [len(x) for x in out["p_"]] == [c] * P
    gather = load(tmp_path, programs.param_gather(COUNTS, dtype, P), "gather", P, None)
    stale = np.full(c * P, -3.0, np.float32)
    ins = dict(ps=out["p_"], p=stale)
    if dtype != "FP32":
        ins.update(ws=out["w_"], w=stale)
    whole = gather.run_cpu(ins)
    n = sum(COUNTS)
    res = {k: v[:n] for k, v in (whole.items() if isinstance(whole, dict)
                                 else [("p_", whole)])}
    return res, {k: np.concatenate(new[k])[:n] for k in state}


@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", ["FP32", "BF16", "FP16"])
@pytest.mark.parametrize("o", VARIANTS, ids=["plain", "l2-amsgrad-maximize", "capturable"])
def test_split_equals_fused(tmp_path, P, dtype, o):
    names = programs.step_inputs("adam", dtype, **o)["state"]
    g, p, state = data(P, dtype, names)
    want, want_state = fused(tmp_path, P, dtype, o, g, p, state)
    got, got_state = split(tmp_path, P, dtype, o, g, p, state)
    np.testing.assert_array_equal(got["p_"], want["p_"])
    assert not np.array_equal(want["p_"], p)  # the step changed something
    if dtype != "FP32":
        np.testing.assert_array_equal(got["w_"], want["w_"])
    for k in names:
        np.testing.assert_array_equal(got_state[k], want_state[k])


@pytest.mark.parametrize("P", [1, 3, 4, 8])
def test_slices_are_the_fused_programs_blocks(tmp_path, P):
    """Each rank's slice starts where the fused program's does (ceil(N/P)
    elements a rank), so the padding is only ever at the end."""
    text = programs.optimizer("adam", COUNTS, "FP32")
    run = load(tmp_path, text, "adam", P, "paper")
    c, pad = programs.slice_layout(COUNTS, P)
    sizes = [run.tensor_info("m", r).local_shape[0] for r in range(P)]
    assert sizes[:-1] == [c] * (P - 1) and sum(sizes) + pad == c * P


def test_refusals():
    with pytest.raises(ValueError, match="adam only"):
        programs.optimizer_rs("lamb", COUNTS)
    for o in (dict(clip=True), dict(amp=True)):
        with pytest.raises(ValueError, match="no such variant"):
            programs.optimizer_rs("adam", COUNTS, "FP32", 2, **o)
    with pytest.raises(ValueError, match="ranks 0"):
        programs.slice_layout(COUNTS, 0)
