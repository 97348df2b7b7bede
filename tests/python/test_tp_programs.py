"""The tensor- and sequence-parallel layers' programs (coconet.tp_programs) on
the CPU reference: every schedule against its program at P = 1, 2, 3, 4 and
8, and each layer's forward and backward against NumPy's formulas on whole
tensors at P = 2 and 4, so that the slicing and gathering of every tensor is
proven without GPUs."""
import re

import numpy as np
import pytest

import coconet
from coconet import programs
from coconet import tp_programs as tp

T, H, F = 24, 8, 24
SIZES = {"T": T, "H": H, "F": F}


def _load(tmp_path, text, ranks):
    return coconet.load(programs.write(text, "tp", str(tmp_path)), sizes=SIZES, ranks=ranks)


def _layout_dim(layout):
    m = re.match(r"Sliced\((\d+)\)", layout)
    return int(m.group(1)) if m else None


def _give(prog, name, value, ranks):
    """The run's input for a whole value: split as its layout says (a Local
    value: a list of each rank's partial, given as is)"""
    layout = prog.tensor_info(name).layout
    d = _layout_dim(layout)
    if d is not None:
        return np.split(value, ranks, axis=d)
    return value


def _whole(prog, name, value):
    """An output as one array: Sliced parts joined along their dimension"""
    d = _layout_dim(prog.tensor_info(name).layout)
    return np.concatenate(value, axis=d) if d is not None else value


def _inputs(prog, ranks, rng, given=None):
    """Random whole inputs (a Local one: each rank's own partial), and the
    run's inputs made of them"""
    given = dict(given or {})
    whole, run_in = {}, {}
    for name in prog.inputs:
        info = prog.tensor_info(name)
        if name in given:
            whole[name] = given[name]
        elif info.layout == "Local":
            whole[name] = [rng.standard_normal(info.global_shape) for _ in range(ranks)]
        else:
            whole[name] = rng.standard_normal(info.global_shape) if info.global_shape else 1.0
        run_in[name] = whole[name] if info.layout == "Local" else _give(prog, name, whole[name],
                                                                        ranks)
    return whole, run_in


PROGRAMS = [("column", d, sp) for d in tp.DIRECTIONS for sp in (True, False)] + \
           [("row", d, sp) for d in tp.DIRECTIONS for sp in (True, False)] + \
           [(n, d, None) for n in tp.NORMS for d in tp.DIRECTIONS]


def _text(kind, direction, sp, dtype="FP32", p_drop=0.1):
    if kind == "column":
        return tp.column_parallel(direction, dtype, sp)
    if kind == "row":
        return tp.row_parallel(direction, dtype, sp)
    return tp.norm_after_row_parallel(direction, dtype, kind, p_drop)


@pytest.mark.parametrize("kind,direction,sp", PROGRAMS)
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 8])
def test_schedules_match_program(tmp_path, kind, direction, sp, ranks):
    prog = _load(tmp_path, _text(kind, direction, sp), ranks)
    rng = np.random.default_rng(ranks)
    _, run_in = _inputs(prog, ranks, rng, {"hn": float(H)})
    want = prog.run_cpu(run_in)
    assert prog.schedules or kind in ("column", "row") and not sp
    for name in prog.schedules:
        got = prog.schedule(name).run_cpu(run_in)
        for out in prog.outputs:
            a, b = (np.asarray(_whole(prog, out, v), np.float64) for v in (got[out], want[out]))
            assert np.allclose(a, b, rtol=1e-5, atol=1e-5), (name, out)


def _layer_norm(z, gamma, beta, rms):
    xc = z if rms else z - z.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
    xh = xc * rstd
    return xh * gamma + (0 if rms else beta), xh, rstd


def _norm_backward(dy, xh, rstd, gamma, rms):
    dxh = dy * gamma
    mean = 0 if rms else dxh.mean(-1, keepdims=True)
    return (dxh - mean - xh * (dxh * xh).mean(-1, keepdims=True)) * rstd


def _check(got, want):
    for name, value in want.items():
        assert np.allclose(np.asarray(got[name], np.float64), value, rtol=1e-4, atol=1e-4), name


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("kind", ["column", "row"])
def test_linear_against_numpy(tmp_path, ranks, sp, kind):
    """y = x W^T + b; dX = dY W, dW = dY^T x, db = the sum of dY over tokens"""
    make = tp.column_parallel if kind == "column" else tp.row_parallel
    rng = np.random.default_rng(7)
    fwd = _load(tmp_path, make("forward", "FP32", sp), ranks)
    whole, run_in = _inputs(fwd, ranks, rng)
    out = fwd.run_cpu(run_in)
    x, w, b = whole["x"], whole["w"], whole["b"]
    _check({"y": _whole(fwd, "y", out["y"])}, {"y": x @ w.T + b})
    if "g" in out:  # the gathered input, kept for the backward
        _check({"g": out["g"]}, {"g": x})
    bwd = _load(tmp_path, make("backward", "FP32", sp), ranks)
    saved = {"g": x, "w": w} if kind == "column" else {"x": x, "w": w}
    whole, run_in = _inputs(bwd, ranks, rng, saved)
    out = bwd.run_cpu(run_in)
    dy = whole["dy"]
    _check({k: _whole(bwd, k, out[k]) for k in ("dx", "dw", "db")},
           {"dx": dy @ w, "dw": dy.T @ x, "db": dy.sum(0)})


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("norm", tp.NORMS)
def test_norm_after_row_parallel_against_numpy(tmp_path, ranks, norm):
    rng = np.random.default_rng(9)
    rms = norm == "rmsnorm"
    fwd = _load(tmp_path, tp.norm_after_row_parallel("forward", "FP32", norm, 0.0), ranks)
    whole, run_in = _inputs(fwd, ranks, rng, {"hn": float(H)})
    out = fwd.run_cpu(run_in)
    x, w, b, r, gamma = (whole[k] for k in ("x", "w", "b", "r", "gamma"))
    z = x @ w.T + b + r
    ln, xh, rstd = _layer_norm(z, gamma, whole.get("beta"), rms)
    _check(out, {"out": ln, "z": z})
    bwd = _load(tmp_path, tp.norm_after_row_parallel("backward", "FP32", norm, 0.0), ranks)
    whole, run_in = _inputs(bwd, ranks, rng, {"z": z, "gamma": gamma, "x": x, "w": w,
                                               "hn": float(H)})
    out = bwd.run_cpu(run_in)
    dout = whole["dout"]
    dr = _norm_backward(dout, xh, rstd, gamma, rms) + whole["dz"]
    want = {"dr": dr, "db": dr.sum(0), "dx": dr @ w, "dw": dr.T @ x,
            "dgamma": (dout * xh).sum(0)}
    if not rms:
        want["dbeta"] = dout.sum(0)
    _check({k: _whole(bwd, k, out[k]) for k in want}, want)


@pytest.mark.parametrize("norm", tp.NORMS)
@pytest.mark.parametrize("p_drop", [0.0, 0.1])
def test_norm_backward_has_no_collective(norm, p_drop):
    """The gradients it takes are whole on every rank: nothing to reduce;
    its one schedule fuses the row statistics"""
    text = tp.norm_after_row_parallel("backward", "BF16", norm, p_drop)
    assert not re.search(r"AllReduce|ReduceScatter|AllGather", text), text
    assert re.findall(r"^Schedule (\w+)", text, re.M) == ["rows"]
    assert re.search(r"Tensor dout\(BF16, \[T,H\], Replicated", text)


@pytest.mark.parametrize("kind", ["column", "row"])
@pytest.mark.parametrize("direction", tp.DIRECTIONS)
@pytest.mark.parametrize("sp", [True, False])
def test_without_bias(tmp_path, kind, direction, sp):
    make = tp.column_parallel if kind == "column" else tp.row_parallel
    text = make(direction, "BF16", sp, bias=False)
    assert "Tensor b(" not in text and " db " not in text
    prog = _load(tmp_path, text, 4)
    assert "b" not in prog.inputs and "db" not in prog.outputs
    _, run_in = _inputs(prog, 4, np.random.default_rng(3))
    want = prog.run_cpu(run_in)
    for name in prog.schedules:
        got = prog.schedule(name).run_cpu(run_in)
        for out in prog.outputs:
            assert np.array_equal(np.asarray(_whole(prog, out, got[out])),
                                  np.asarray(_whole(prog, out, want[out]))), (name, out)


def test_argument_errors():
    with pytest.raises(ValueError, match="direction 'sideways'"):
        tp.column_parallel("sideways")
    with pytest.raises(ValueError, match="dtype 'FP8'"):
        tp.row_parallel("forward", "FP8")
    with pytest.raises(ValueError, match="norm 'batchnorm'"):
        tp.norm_after_row_parallel("forward", "BF16", "batchnorm")
    with pytest.raises(ValueError, match="dropout probability 1.5"):
        tp.norm_after_row_parallel("forward", "BF16", "layernorm", 1.5)
