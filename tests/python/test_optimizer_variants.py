"""test_optimizer_variants.py: the variants of coconet.programs.optimizer
(Adam's L2 against AdamW's decoupled decay, amsgrad, maximize, clipping by
the global norm of the summed gradient, GradScaler's grad_scale and
found_inf, lr and the step count read from tensors) on the CPU reference
executor, under the plain program and the paper's fuse(RS-Opt-AG),
against NumPy formulas written after torch.optim.Adam / AdamW and
torch.nn.utils.clip_grad_norm_.

Run by tests/groups/75-python.sh (pytest, from the checkout after `make`)."""
import itertools

import numpy as np
import pytest

import coconet
from coconet import programs

COUNTS, P = [30, 7, 64, 1], 3
HP = dict(lr=0.01, t=3.0, beta1=0.9, beta2=0.99, eps=1e-6, wd=0.05, gscale=1.0 / P)


def reference(kind, p, g, m, v, vm, o, gs=1.0, fin=0.0, maxnorm=None):
    """One step in double: torch's formulas. g is the list of the ranks'
    gradients; returns the new p, m, v, vm, the norm and found."""
    h = HP
    with np.errstate(invalid="ignore"):  # Inf - Inf: a NaN, as summed on the ranks
        gu = sum(x.astype(np.float64) for x in g) * h["gscale"] / gs
    norm = np.sqrt(np.sum(gu * gu))
    found = float(fin != 0 or not np.isfinite(norm))
    if found:
        return p, m, v, vm, norm, found
    if maxnorm is not None:  # clip_grad_norm_'s factor
        gu = gu * min(maxnorm / (norm + 1e-6), 1.0)
    gm = -gu if o.get("maximize") else gu
    if o.get("decay") == "l2":
        gm = gm + h["wd"] * p
    m = h["beta1"] * m + (1 - h["beta1"]) * gm
    v = h["beta2"] * v + (1 - h["beta2"]) * gm * gm
    vm = np.maximum(vm, v) if o.get("amsgrad") else vm
    mh = m / (1 - h["beta1"] ** h["t"])
    vh = (vm if o.get("amsgrad") else v) / (1 - h["beta2"] ** h["t"])
    if kind == "adam":
        decay = h["lr"] * h["wd"] * p if o.get("decay", "decoupled") == "decoupled" else 0
        return p - decay - h["lr"] * mh / (np.sqrt(vh) + h["eps"]), m, v, vm, norm, found
    u = mh / (np.sqrt(vh) + h["eps"]) + (h["wd"] * p if o.get("decay", "decoupled") ==
                                         "decoupled" else 0)
    cuts = np.cumsum([0] + COUNTS) if o.get("trust") == "tensor" else [0, len(p)]
    ratio = np.empty_like(p)
    for a, b in zip(cuts, cuts[1:]):  # one trust ratio per parameter tensor, or one
        r1, r2 = np.linalg.norm(p[a:b]), np.linalg.norm(u[a:b])
        ratio[a:b] = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
    return p - h["lr"] * ratio * u, m, v, vm, norm, found


def load(tmp_path, kind, schedule, **o):
    text = programs.optimizer(kind, COUNTS, "FP32", **o)
    prog = coconet.load(programs.write(text, kind, str(tmp_path)), ranks=P)
    return prog if schedule == "program" else prog.schedule(schedule)


def state_inputs(run, schedule, names, values):
    """Each state tensor whole, or under `paper` each rank's slice."""
    if schedule != "paper":
        return dict(zip(names, values))
    cut = np.cumsum([0] + [run.tensor_info("m", r).local_shape[0] for r in range(P)])
    return {n: [x[cut[r]:cut[r + 1]] for r in range(P)] for n, x in zip(names, values)}


def whole(x):
    return np.concatenate(x) if isinstance(x, list) else x


def step(tmp_path, kind, schedule, o, g=None, gs=1.0, fin=0.0, maxnorm=None):
    """Runs one step of the variant and its reference; returns both."""
    run = load(tmp_path, kind, schedule, **o)
    io = programs.step_inputs(kind, "FP32", **o)
    n = sum(COUNTS)
    rng = np.random.default_rng(7)
    if g is None:
        g = [rng.standard_normal(n).astype(np.float32) for _ in range(P)]
    p0 = rng.standard_normal(n).astype(np.float32)
    m0 = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v0 = (rng.random(n) * 0.1).astype(np.float32)
    vm0 = (v0 + rng.random(n) * 0.05 * (rng.random(n) < 0.5)).astype(np.float32)
    inputs = dict(g=g, p=p0, **HP, gs=gs, fin=fin)
    if maxnorm is not None:
        inputs["maxnorm"] = maxnorm
    inputs = {k: x for k, x in inputs.items() if k in ("g", "p") or k in io["device"] or
              k in io["scalars"]}
    inputs.update(state_inputs(run, schedule, io["state"], [m0, v0, vm0]))
    out, new = run.run_cpu(inputs, with_inputs=True)
    assert list(out) == io["outputs"]
    want = reference(kind, p0.astype(np.float64), g, m0, v0, vm0, o, gs, fin, maxnorm)
    return out, new, want


VARIANTS = [dict(), dict(decay="l2"), dict(amsgrad=True), dict(maximize=True),
            dict(decay="l2", amsgrad=True, maximize=True), dict(capturable=True),
            dict(clip=True), dict(amp=True), dict(clip=True, amp=True, capturable=True,
                                                  amsgrad=True, decay="l2")]


@pytest.mark.parametrize("schedule", ["program", "paper"])
@pytest.mark.parametrize("o", VARIANTS, ids=lambda o: "-".join("%s=%s" % kv for kv in
                                                               sorted(o.items())) or "plain")
def test_adam_variants(tmp_path, schedule, o):
    maxnorm = 1.0 if o.get("clip") else None
    out, new, want = step(tmp_path, "adam", schedule, o, gs=4.0 if o.get("amp") else 1.0,
                          maxnorm=maxnorm)
    wp, wm, wv, wvm, norm, _ = want
    assert np.allclose(out["p_"], wp, rtol=2e-5, atol=2e-6)
    assert np.allclose(whole(new["m"]), wm, rtol=2e-5, atol=2e-6)
    assert np.allclose(whole(new["v"]), wv, rtol=2e-5, atol=2e-7)
    if o.get("amsgrad"):
        assert np.allclose(whole(new["vm"]), wvm, rtol=2e-5, atol=2e-7)
    if o.get("clip"):
        assert np.isclose(float(out["gnorm"]), norm, rtol=1e-5)
        assert norm > maxnorm  # the clipping took effect
    if o.get("amp"):
        assert float(out["found"]) == 0


@pytest.mark.parametrize("schedule", ["program", "paper"])
@pytest.mark.parametrize("o", [dict(), dict(decay="l2"), dict(clip=True, amp=True),
                               dict(trust="tensor"),
                               dict(trust="tensor", clip=True, amp=True, capturable=True)],
                         ids=["plain", "l2", "clip-amp", "per-tensor", "per-tensor-clip-amp"])
def test_lamb_variants(tmp_path, schedule, o):
    maxnorm = 2.5 if o.get("clip") else None
    out, new, want = step(tmp_path, "lamb", schedule, o, maxnorm=maxnorm,
                          gs=2.0 if o.get("amp") else 1.0)
    assert np.allclose(out["p_"], want[0], rtol=2e-5, atol=2e-6)
    assert np.allclose(whole(new["m"]), want[1], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("schedule", ["program", "paper"])
@pytest.mark.parametrize("bad", ["inf", "nan", "-inf+inf", "flag"])
def test_a_skipped_step_changes_nothing(tmp_path, schedule, bad):
    """An Inf or NaN in one rank's gradient (or two that cancel into a NaN
    when summed), or the caller's found_inf: found is 1 on every rank and
    the parameters and state keep their values."""
    n = sum(COUNTS)
    rng = np.random.default_rng(3)
    g = [rng.standard_normal(n).astype(np.float32) for _ in range(P)]
    if bad == "inf":
        g[1][40] = np.inf
    elif bad == "nan":
        g[2][100] = np.nan
    elif bad == "-inf+inf":
        g[0][5], g[2][5] = -np.inf, np.inf
    o = dict(amp=True, clip=True, amsgrad=True)
    out, new, want = step(tmp_path, "adam", schedule, o, g=g, fin=1.0 if bad == "flag" else 0.0,
                          maxnorm=1.0)
    run_found = out["found"]
    assert float(run_found) == 1.0 and want[5] == 1.0
    np.testing.assert_array_equal(out["p_"], want[0].astype(np.float32))
    for name, k in (("m", 1), ("v", 2), ("vm", 3)):
        np.testing.assert_array_equal(whole(new[name]), want[k])


def test_the_plain_program_is_the_default():
    """No option, or every option at its default, writes the same text."""
    for kind, dtype in itertools.product(("adam", "lamb"), ("FP32", "BF16")):
        text = programs.optimizer(kind, COUNTS, dtype)
        defaults = {k: d for k, d in programs.VARIANT.items()
                    if not (kind == "adam" and k == "trust") and
                    not (kind == "lamb" and k == "amsgrad")}
        assert programs.optimizer(kind, COUNTS, dtype, **defaults) == text
        assert "Tensor lr" not in text and "Scalar lr(FP32)" in text


def test_mixed_precision_scales_in_fp32(tmp_path):
    """With BF16 gradients, clipping and scaling take the gradient in FP32
    (its norm would overflow BF16's rounding, not its range: FP16's both)."""
    text = programs.optimizer("adam", [40, 9], "FP16", clip=True, amp=True)
    assert "Var gu = Cast(avg, FP32) * gscale / gs;" in text
    prog = coconet.load(programs.write(text, "adam", str(tmp_path)), ranks=2)
    run = prog.schedule("paper")
    n = 49
    g = [np.full(n, 3000.0, np.float32), np.full(n, 2000.0, np.float32)]
    zeros = [np.zeros(run.tensor_info("m", r).local_shape, np.float32) for r in range(2)]
    out = run.run_cpu(dict(g=g, p=np.ones(n, np.float32), w=np.ones(n, np.float32), m=zeros,
                           v=zeros, lr=0.1, t=1.0, gs=1024.0, fin=0.0, beta1=0.9, beta2=0.999,
                           eps=1e-8, wd=0.0, gscale=0.5, maxnorm=1.0))
    # the FP16 sum 5000 is finite; the norm of 49 x 2500/1024 is about 17
    assert float(out["found"]) == 0
    assert np.isclose(float(out["gnorm"]), 2500 / 1024 * 7, rtol=1e-3)
    assert np.allclose(out["p_"], 0.9, rtol=2e-4)


def test_step_inputs_name_what_a_step_takes():
    io = programs.step_inputs("adam", "BF16", capturable=True, amp=True, clip=True,
                              amsgrad=True)
    assert io["device"] == ["lr", "t", "gs", "fin"]
    assert io["scalars"] == ["beta1", "beta2", "eps", "wd", "gscale", "maxnorm"]
    assert io["state"] == ["m", "v", "vm"]
    assert io["outputs"] == ["p_", "w_", "gnorm", "found"]
    amp = programs.step_inputs("adam", amp=True)
    assert amp["device"] == ["t", "gs", "fin"] and amp["scalars"][0] == "lr"
    plain = programs.step_inputs("lamb")
    assert plain["device"] == [] and plain["outputs"] == ["p_"]
    assert plain["scalars"][:2] == ["lr", "t"]


def test_variant_errors():
    with pytest.raises(ValueError, match="optimizer option 'nesterov'"):
        programs.optimizer("adam", [3], nesterov=True)
    with pytest.raises(ValueError, match="decay 'l1'"):
        programs.optimizer("adam", [3], decay="l1")
    with pytest.raises(ValueError, match="amsgrad is an option of adam"):
        programs.optimizer("lamb", [3], amsgrad=True)
    with pytest.raises(ValueError, match="trust 'layer'"):
        programs.optimizer("lamb", [3], trust="layer")


# The optimizer programs that the cuda-gen group compiles (tests/gpu/optim_*.coco):
# what coconet.programs.optimizer writes now, for these members and options
CHECKED_IN = {"optim_adamw_step": ("adam", "FP32", dict(clip=True, amp=True, capturable=True)),
              "optim_adam_all": ("adam", "BF16", dict(decay="l2", amsgrad=True, maximize=True,
                                                      clip=True, amp=True, capturable=True)),
              "optim_lamb_step": ("lamb", "FP32", dict(clip=True, amp=True, capturable=True)),
              "optim_lamb_tensor": ("lamb", "FP32", dict(trust="tensor", clip=True))}


@pytest.mark.parametrize("name", sorted(CHECKED_IN))
def test_the_compiled_programs_are_current(name):
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    kind, dtype, o = CHECKED_IN[name]
    with open(os.path.join(root, "tests", "gpu", name + ".coco")) as f:
        assert f.read() == programs.optimizer(kind, [1024, 33, 4096, 7], dtype, **o), \
            "tests/gpu/%s.coco: write it again with coconet.programs.optimizer" % name


def test_step_variant_from_a_groups_settings():
    sv = programs.step_variant
    assert sv("adam", {"lr": 1e-3, "amsgrad": False}) == {}
    assert sv("adam", {}, decay="l2") == {"decay": "l2"}
    assert sv("adam", {"amsgrad": True, "maximize": True, "capturable": True,
                       "max_grad_norm": 1.0}, amp=True) == \
        dict(amsgrad=True, maximize=True, capturable=True, clip=True, amp=True)
    assert sv("lamb", {"trust": "group", "max_grad_norm": None}) == {}
    assert sv("lamb", {}) == sv("lamb", {"trust": "tensor"}) == {"trust": "tensor"}
    text = programs.optimizer("adam", [5], "FP32", **sv("adam", {"max_grad_norm": 2.0}))
    assert "Scalar maxnorm(FP32);" in text
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="max_grad_norm"):
            sv("adam", {"max_grad_norm": bad})
    with pytest.raises(ValueError, match="amsgrad is an option of Adam"):
        sv("lamb", {"amsgrad": True})


def test_per_tensor_trust_differs_from_the_groups(tmp_path):
    """The per-tensor ratios are not the group's: a member whose update is
    small against its weights takes a larger step."""
    outs = {}
    for trust in ("group", "tensor"):
        out, _, want = step(tmp_path, "lamb", "paper", dict(trust=trust))
        assert np.allclose(out["p_"], want[0], rtol=2e-5, atol=2e-6)
        outs[trust] = out["p_"]
    assert not np.allclose(outs["group"], outs["tensor"], rtol=1e-4)
