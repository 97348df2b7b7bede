"""test_session.py: the GPU path's layers that need no GPU and no torch:
the ctypes session layer (coconet._session) against the stand-in runtime
(build/fake/libfake_rt.so, host memory) and a host-only "generated" object
(tests/gpu/host.cu, built through coco_build_cuda's --cuda-source path);
VariantSpec's argument checks and their messages; knob parsing; which NCCL
to build against; and the programs of coconet.torch's optimizers and layer
(coconet.programs) on the CPU reference executor against NumPy's formulas.

The torch-side tests need a GPU: tests/gpu/torch.sh."""
import ctypes
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import coconet
from coconet import _session as S
from coconet import programs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE = os.path.join(ROOT, "build", "fake", "libfake_rt.so")
HAS_NVCC = os.path.exists(os.path.join(ROOT, "build", "cuda.conf"))


def example(name):
    return os.path.join(ROOT, "examples", name)


# ---- knobs and NCCL ----

def test_knobs():
    assert S.parse_knobs("") == (-1, -1)
    assert S.parse_knobs("COCONET_FUSED=push") == (4, -1)
    assert S.parse_knobs("COCONET_FUSED=nccl COCONET_OVERLAP_CHUNKS=4") == (3, 4)
    with pytest.raises(coconet.CocoError, match="knob 'COCONET_FUSED=fast'"):
        S.parse_knobs("COCONET_FUSED=fast")
    with pytest.raises(coconet.CocoError, match="COCONET_OVERLAP_CHUNKS=0..64"):
        S.parse_knobs("COCONET_OVERLAP_CHUNKS=65")


def test_fused_names_match_header():
    """FUSED is COCO_FUSED_ALGOS of include/coconet_cuda.h, value for value"""
    with open(os.path.join(ROOT, "include", "coconet_cuda.h"), encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"#define COCO_FUSED_ALGOS\(X\)((?:.*\\\n)*.*)", text).group(1)
    spellings = re.findall(r'X\(\s*\w+\s*,\s*"([^"]*)"\s*\)', body)
    assert spellings, "no X(NAME, spelling) in COCO_FUSED_ALGOS"
    assert S.FUSED == {name: value for value, name in enumerate(spellings)}


def _nccl_tree(tmp_path, name, version, device_api=True):
    prefix = tmp_path / name
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "include" / "nccl.h").write_text("#define NCCL_VERSION_CODE %d\n" % version)
    if device_api:
        (prefix / "include" / "nccl_device.h").write_text("\n")
    return prefix


def test_nccl_setup(tmp_path):
    system = _nccl_tree(tmp_path, "system", 22803)
    build = tmp_path / "build"
    build.mkdir()
    (build / "cuda.conf").write_text("NCCL_INCLUDE=%s/include\nNCCL_LIB=%s/lib\n"
                                     % (system, system))
    rt = str(build / "libcoconet_cuda.so")
    lib = str(system / "lib" / "libnccl.so.2")
    assert S.nccl_setup(rt, (lib, 22803)) is None  # the runtime's own NCCL is loaded
    torch_nccl = _nccl_tree(tmp_path, "wheel", 22809)
    assert S.nccl_setup(rt, (str(torch_nccl / "lib" / "libnccl.so.2"), 22809)) == str(torch_nccl)
    bare = _nccl_tree(tmp_path, "bare", 22809, device_api=False)
    with pytest.raises(coconet.CocoError) as e:
        S.nccl_setup(rt, (str(bare / "lib" / "libnccl.so.2"), 22809))
    msg = str(e.value)
    assert "loaded NCCL 2.28.9" in msg and "NCCL 2.28.3 headers" in msg
    assert "LD_PRELOAD" not in msg  # one NCCL by building against it, not by preloading
    assert "pip install --no-build-isolation --force-reinstall ./python" in msg
    assert "%s/include" % system in msg and "make NCCL_HOME=PREFIX" in msg


def test_runtime_nccl(monkeypatch):
    """The NCCL the runtime's calls bind to comes from the runtime itself
    (coco_session_nccl), not from the files the process has mapped."""
    monkeypatch.setenv("COCONET_FAKE_NCCL", "22809 /opt/wheel/lib/libnccl.so.2")
    assert S.Runtime(FAKE).nccl() == ("/opt/wheel/lib/libnccl.so.2", 22809)
    monkeypatch.delenv("COCONET_FAKE_NCCL")
    assert S.Runtime(FAKE).nccl() == ("libfake_nccl.so.2", 22803)


# ---- what one rank passes ----

def test_spec_adam_paper():
    p = coconet.load(example("adam.coco"), sizes={"N": 1001}, ranks=4)
    spec = S.VariantSpec(p, "paper", 3)
    kinds = {s.name: (s.kind, s.type, s.shape) for s in spec.inputs}
    assert kinds["g"] == ("tensor", "FP16", (1001,))
    assert kinds["m"] == ("tensor", "FP32", (248,))  # its slice: 1001 = 251 * 3 + 248
    assert kinds["lr"][0] == "scalar"
    assert [o.name for o in spec.outputs] == ["p_"]  # named as the program names it
    assert spec.sizes == [1001] and spec.group_size == 0
    with pytest.raises(coconet.CocoError, match="'x' is not an input of 'paper'"):
        spec.input("x")


def test_spec_scattered():
    p = coconet.load(example("adam_scattered.coco"), ranks=2)
    spec = S.VariantSpec(p, "program", 0)
    g = spec.input("g")
    assert g.kind == "scattered" and g.members == (256, 16, 1024, 64, 3, 5)
    with pytest.raises(coconet.CocoError, match="expected a list of 6 FP16 tensors"):
        spec.check_members(g, 5)
    with pytest.raises(coconet.CocoError) as e:
        spec.check_tensor(g, "FP16", (4, 5), True, True, "cuda:0", member=2)
    assert "input 'g' member 2 of 'program' (rank 0): expected FP16 with 1024 elements" in str(e.value)
    assert "given 20 elements (shape [4, 5])" in str(e.value)


def test_spec_group():
    p = coconet.load(example("pipeline.coco"), ranks=4)
    assert S.VariantSpec(p, "program", 0).group_size == p.tensor_info("b", 0).group_ranks == 2


def test_spec_messages():
    p = coconet.load(example("self_attention.coco"), ranks=2)
    spec = S.VariantSpec(p, "paper", 1)
    w = spec.input("w")
    assert w.shape == (12, 24)
    spec.check_tensor(w, "FP16", (12, 24), True, True, "cuda:1")  # matches: no error
    with pytest.raises(coconet.CocoError) as e:
        spec.check_tensor(w, "FP32", (24, 24), False, False, "cpu")
    msg = str(e.value)
    assert msg.startswith("input 'w' of 'paper' (rank 1): expected FP16 [12, 24], contiguous, "
                          "on this rank's GPU; given ")
    assert "element type FP32" in msg and "shape [24, 24]" in msg
    assert "not contiguous" in msg and "on cpu" in msg


def test_build_errors():
    p = coconet.load(example("adam.coco"), ranks=2)
    with pytest.raises(coconet.CocoError, match="no schedule named 'nope'"):
        S.build(p, "nope")
    os.environ.setdefault("COCONET_CACHE", "/tmp/coconet-test-cache-%d" % os.getuid())
    with pytest.raises(coconet.CocoError, match="coconet tune"):
        S.build(p, "tuned")


@pytest.mark.skipif(not HAS_NVCC, reason="no nvcc when built")
def test_build_one_child(tmp_path, monkeypatch):
    """coconet._build_one, coconet.torch.tp.prebuild's child: builds a
    program into the cache where the process's own first build finds it,
    and names a program it cannot build"""
    from coconet import tp_programs
    path = programs.write(tp_programs.row_parallel("forward", "FP32", False, True),
                          "row_forward", str(tmp_path))
    for k, v in (("COCONET_CACHE", str(tmp_path / "cache")), ("COCONET_CUDA_ARCH", "sm_80"),
                 ("COCONET_HOME", ROOT)):
        monkeypatch.setenv(k, v)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    sizes = {"T": 8, "H": 16, "F": 32}
    cmd = [sys.executable, "-m", "coconet._build_one", path, "program", json.dumps(sizes), "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    built = glob.glob(str(tmp_path / "cache" / "*.so"))
    assert len(built) == 1
    assert S.build(coconet.load(path, sizes=sizes, ranks=1), "program").so == built[0]
    bad = subprocess.run(cmd[:4] + ["nope"] + cmd[5:], env=env, capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 1 and "no schedule named 'nope'" in bad.stderr, bad.stderr


# ---- the session on the stand-in runtime ----

needs_fake = pytest.mark.skipif(not (os.path.exists(FAKE) and HAS_NVCC),
                                reason="no build/fake/libfake_rt.so or no nvcc when built")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setenv("COCONET_CUDA_RUNTIME", FAKE)
    monkeypatch.setenv("COCONET_CUDA_ARCH", "sm_80")  # no GPU here for -arch=native
    monkeypatch.setenv("COCONET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COCONET_HOME", ROOT)
    rt = S.Runtime()
    return rt


def _host(rt, ranks, rank, arena=1 << 20):
    p = coconet.load(os.path.join(ROOT, "tests", "gpu", "host.coco"), ranks=ranks)
    built = S.build(p, "fused", cuda_source=os.path.join(ROOT, "tests", "gpu", "host.cu"))
    sess = S.Session(rt, rank, ranks, 0, rt.unique_id(), arena_bytes=arena)
    return p, built, sess


@needs_fake
def test_window_args(fake):
    """The arguments a variant's one-kernel collectives reach in the peers'
    windows, read from the object (coconet.torch refuses such a tensor
    outside the arena); an object without the lists gives None."""
    _, built, sess = _host(fake, 2, 0)
    assert S.window_args(built.so, "fused") == (frozenset({0}), frozenset({0}))
    assert S.window_args(built.so, "program") is None
    assert S.window_args("/nonexistent.so", "fused") is None
    sess.close()


def _put(ptr, a):
    ctypes.memmove(ptr, a.ctypes.data, a.nbytes)


def _get(ptr, n, dtype=np.float32):
    return np.frombuffer(ctypes.string_at(ptr, n * np.dtype(dtype).itemsize), dtype).copy()


@needs_fake
@pytest.mark.parametrize("variant", ["program", "fused"])
def test_session_call(fake, variant):
    p, built, sess = _host(fake, 2, 1)
    assert built.variant == "fused" and built.so.endswith(".so")
    spec = S.VariantSpec(p, variant, 1)
    call = S.Call(sess, sess.load(built.so), spec)
    x = np.linspace(-2, 2, 1000).astype(np.float32)
    s0 = np.full(1000, 0.25, np.float32)
    px, ps, py = sess.alloc(4000), sess.alloc(4000), sess.alloc(4000)
    _put(px, x)
    _put(ps, s0)
    call.inputs[0], call.inputs[1], call.scalars[2], call.outputs[0] = px, ps, 1.5, py
    assert call(7, None) == 0  # every buffer in the arena
    ref, new = p.run_cpu({"x": x, "s": s0, "a": 1.5}, with_inputs=True)
    assert np.array_equal(_get(py, 1000), ref["y"])
    assert np.array_equal(_get(ps, 1000), new["s"])  # the Updated input, in place
    # a buffer outside the arena is used where it lies, and counted
    y2 = np.zeros(1000, np.float32)
    call.outputs[0] = y2.ctypes.data
    _put(ps, s0)
    assert call(7, None) == 1
    assert np.array_equal(y2, ref["y"])
    sess.close()


@needs_fake
def test_session_arena_and_errors(fake):
    p, built, sess = _host(fake, 1, 0, arena=4096)
    base, size, used = sess.arena()
    assert size == 4096 and used == 0
    a = sess.alloc(1)
    assert a == base and sess.arena()[2] == 512  # rounded up to 512 bytes
    assert sess.in_arena(a, 512) and not sess.in_arena(a, 8192)
    with pytest.raises(coconet.CocoError, match="the arena is full"):
        sess.alloc(8192)
    m = sess.load(built.so)
    assert sess.output_alias(m, 0) == -1
    bad = S.VariantSpec(p, "program", 0)
    bad.variant = "nothere"
    with pytest.raises(coconet.CocoError, match="no entry point for 'nothere'"):
        S.Call(sess, m, bad)(1, None)
    with pytest.raises(coconet.CocoError, match="cannot load the generated code"):
        sess.load("/nonexistent/x.so")
    assert "stand-in runtime" in sess.describe()
    sess.close()
    with pytest.raises(coconet.CocoError, match="the NCCL unique id has 3 bytes"):
        S.Session(fake, 0, 1, 0, b"abc")
    with pytest.raises(coconet.CocoError, match="rank 2 of 2 ranks: not a rank of the run"):
        S.Session(fake, 2, 2, 0, fake.unique_id())


def test_runtime_missing(monkeypatch):
    monkeypatch.setenv("COCONET_CUDA_RUNTIME", "/nonexistent/libcoconet_cuda.so")
    with pytest.raises(coconet.CocoError, match="cannot load the runtime"):
        S.Runtime()


# ---- the programs of the optimizers and the layer ----

def _adamw(p, gm, m, v, t, lr, b1, b2, eps, wd):
    m = b1 * m + (1 - b1) * gm
    v = b2 * v + (1 - b2) * gm * gm
    mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * wd * p - lr * mh / (np.sqrt(vh) + eps), m, v


def _lamb(p, gm, m, v, t, lr, b1, b2, eps, wd):
    m = b1 * m + (1 - b1) * gm
    v = b2 * v + (1 - b2) * gm * gm
    u = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * p
    r1, r2 = np.linalg.norm(p), np.linalg.norm(u)
    ratio = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
    return p - lr * ratio * u, m, v


@pytest.mark.parametrize("kind", ["adam", "lamb"])
@pytest.mark.parametrize("schedule", ["program", "paper"])
def test_optimizer_programs(tmp_path, kind, schedule):
    counts, P = [30, 7, 64, 1], 3
    path = programs.write(programs.optimizer(kind, counts, "FP32"), kind, str(tmp_path))
    prog = coconet.load(path, ranks=P)
    run = prog if schedule == "program" else prog.schedule(schedule)
    n = sum(counts)
    rng = np.random.default_rng(5)
    g = [rng.standard_normal(n).astype(np.float32) for _ in range(P)]
    p0 = rng.standard_normal(n).astype(np.float32)
    m0 = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v0 = (rng.random(n) * 0.1).astype(np.float32)
    hp = dict(lr=0.01, t=3.0, beta1=0.9, beta2=0.99, eps=1e-6, wd=0.05, gscale=1.0 / P)
    inputs = dict(g=g, p=p0, **hp)
    if schedule == "paper":  # each rank gives its slice of m and v
        cut = np.cumsum([0] + [run.tensor_info("m", r).local_shape[0] for r in range(P)])
        inputs.update(m=[m0[cut[r]:cut[r + 1]] for r in range(P)],
                      v=[v0[cut[r]:cut[r + 1]] for r in range(P)])
    else:
        inputs.update(m=m0, v=v0)
    out, new = run.run_cpu(inputs, with_inputs=True)
    want, wm, _ = (_adamw if kind == "adam" else _lamb)(
        p0.astype(np.float64), sum(x.astype(np.float64) for x in g) / P, m0, v0,
        3.0, 0.01, 0.9, 0.99, 1e-6, 0.05)
    got = list(out.values())[0]
    assert np.allclose(got, want, rtol=2e-5, atol=2e-6)
    got_m = np.concatenate(new["m"]) if schedule == "paper" else new["m"]
    assert np.allclose(got_m, wm, rtol=2e-5, atol=2e-6)


def test_optimizer_mixed_precision(tmp_path):
    counts = [40, 9]
    text = programs.optimizer("adam", counts, "BF16")
    assert "Tensor w(BF16" in text and "Var w_ = Update(w, p_);" in text
    prog = coconet.load(programs.write(text, "adam", str(tmp_path)), ranks=2)
    run = prog.schedule("paper")
    n = sum(counts)
    g = [np.full(n, 0.5, np.float32), np.full(n, -0.25, np.float32)]
    zeros = [np.zeros(run.tensor_info("m", r).local_shape, np.float32) for r in range(2)]
    out, _ = run.run_cpu(dict(g=g, p=np.ones(n, np.float32), w=np.ones(n, np.float32), m=zeros,
                              v=zeros, lr=0.1, t=1.0, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0,
                              gscale=0.5), with_inputs=True)
    assert set(out) == {"p_", "w_"}
    assert np.allclose(out["p_"], 0.9, rtol=2e-4)  # Adam's first step: lr * sign(g)
    bf16 = (out["p_"].view(np.uint32) + 0x7FFF + ((out["p_"].view(np.uint32) >> 16) & 1)) \
        & 0xFFFF0000  # FP32 to BF16, to nearest even
    assert np.array_equal(out["w_"], bf16.view(np.float32))  # the master weights, rounded


def test_program_errors():
    with pytest.raises(ValueError, match="optimizer kind 'sgd'"):
        programs.optimizer("sgd", [3])
    with pytest.raises(ValueError, match="dtype 'FP64'"):
        programs.optimizer("adam", [3], "FP64")
    with pytest.raises(ValueError, match="at least one parameter"):
        programs.optimizer("adam", [])
    with pytest.raises(ValueError, match="a parameter of 0 elements"):
        programs.optimizer("adam", [3, 0])
    with pytest.raises(ValueError, match="dropout probability 1.0"):
        programs.row_parallel("FP16", 1.0)


@pytest.mark.parametrize("schedule", ["program", "fused", "paper"])
def test_row_parallel_program(tmp_path, schedule):
    path = programs.write(programs.row_parallel("FP32", 0.0, True), "rp", str(tmp_path))
    P, B, S_, K, H = 2, 3, 5, 8, 6
    prog = coconet.load(path, sizes={"B": B, "S": S_, "K": K, "H": H}, ranks=P)
    run = prog if schedule == "program" else prog.schedule(schedule)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, S_, K)).astype(np.float32)
    w = rng.standard_normal((K, H)).astype(np.float32)
    b = rng.standard_normal(H).astype(np.float32)
    r = rng.standard_normal((B, S_, H)).astype(np.float32)
    k = K // P
    out = run.run_cpu(dict(x=[x[..., i * k:(i + 1) * k] for i in range(P)],
                           w=[w[i * k:(i + 1) * k] for i in range(P)], b=b, r=r))
    assert np.allclose(out["out"], x.astype(np.float64) @ w + b + r, rtol=1e-5, atol=1e-5)


def test_scalars_rounded_to_their_type():
    """A Scalar reaches the generated code as its type holds it, as the CPU
    reference and the command line give it (Adam's beta2 = 0.999 in FP32)"""
    import struct
    assert S.round_scalar(0.999, "FP32") == struct.unpack("<f", struct.pack("<f", 0.999))[0]
    assert S.round_scalar(0.999, "FP32") != 0.999
    assert S.round_scalar(0.1, "FP16") == float(np.float16(0.1))
    assert S.round_scalar(1e6, "FP16") == float("inf")
    assert S.round_scalar(1 + 2 ** -8, "BF16") == 1.0  # a tie: to even
    assert S.round_scalar(1 + 3 * 2 ** -8, "BF16") == 1 + 2 ** -6
    assert S.round_scalar(1 + 2 ** -8 + 2 ** -40, "BF16") == 1 + 2 ** -7  # not rounded twice
    assert S.round_scalar(2.0 ** -133, "BF16") == 2.0 ** -133  # the least subnormal
    assert S.round_scalar(3.4e38, "BF16") == float("inf")
    assert S.round_scalar(1e-3, "FP64") == 1e-3
    prog = coconet.load(os.path.join(ROOT, "examples", "adam.coco"), ranks=1)
    spec = S.VariantSpec(prog, "program", 0)
    assert {s.name: s.type for s in spec.inputs if s.kind == "scalar"} == {"lr": "FP32", "t": "FP32"}
