"""test_cpu.py: the Python package's CPU part (python/coconet) against the
coconet command: loading, schedules, run_cpu on every example and oracle
program (each output's FNV-1a hash of its bits equal to `coconet run`'s),
inputs written from NumPy, and errors raised as CocoError.

Run by tests/groups/75-python.sh (pytest, from the checkout after `make`)."""
import glob
import os
import re
import subprocess

import numpy as np
import pytest

import coconet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COCONET = os.path.join(ROOT, "coconet")
PROGRAMS = sorted(glob.glob(os.path.join(ROOT, "examples", "*.coco")) +
                  glob.glob(os.path.join(ROOT, "tests", "oracle", "programs", "*.coco")))


def cli(*args):
    env = dict(os.environ, COCONET_BACKEND="cpu")
    return subprocess.run([COCONET, *args], capture_output=True, text=True, env=env, timeout=120)


def cli_summary(path, ranks):
    """{output: (layout, hash)} from `coconet run`'s table."""
    out = cli("run", path, "--ranks", str(ranks), "--schedule", "program").stdout
    rows = {}
    for line in out.splitlines()[2:]:
        if line.startswith("time "):
            break
        f = line.split()
        rows[f[0]] = (f[3], f[4])
    return rows


def bits(a, type_name):
    """The element bit patterns, little-endian, as coconet hashes them."""
    if type_name == "BF16":
        return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()


def fnv1a(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def logical(value, info, ranks):
    """The logical tensor coconet summarises, group after group: Sliced
    parts joined along their dimension, Local ones concatenated, a
    Replicated value as it is."""
    if not isinstance(value, list):
        return value
    g = info.group_ranks
    groups = [value[k:k + g] for k in range(0, len(value), g)] if len(value) == ranks else \
        [[v] for v in value]
    m = re.match(r"Sliced\((\d+)\)", info.layout)
    if m:
        return np.concatenate([np.concatenate(p, axis=int(m.group(1))).reshape(-1) for p in groups])
    return np.concatenate([v.reshape(-1) for p in groups for v in p])


def ranks_allowed(path, ranks):
    return cli("check", path, "--ranks", str(ranks)).returncode == 0


@pytest.mark.parametrize("path", PROGRAMS, ids=os.path.basename)
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_run_cpu_matches_the_command(path, ranks):
    if not ranks_allowed(path, ranks):
        pytest.skip("the program does not allow %d ranks" % ranks)
    prog = coconet.load(path, ranks=ranks)
    want = cli_summary(path, ranks)
    assert set(want) == set(prog.outputs)
    got = prog.run_cpu()
    for name, value in got.items():
        layout, digest = want[name]
        info = prog.tensor_info(name)
        assert info.layout == layout
        assert fnv1a(bits(logical(value, info, ranks), info.type)) == digest, name


@pytest.mark.parametrize("path", PROGRAMS, ids=os.path.basename)
def test_schedules_are_the_commands(path):
    if not ranks_allowed(path, 4):
        pytest.skip("the program does not allow 4 ranks")
    prog = coconet.load(path, ranks=4)
    m = re.search(r"\((\d+) ranks?, (\d+) schedules?\)", cli("check", path, "--ranks", "4").stdout)
    assert m and int(m.group(2)) == len(prog.schedules)
    listed = re.findall(r"^Schedule (\w+)", cli("schedules", path, "--ranks", "4").stdout, re.M)
    assert set(listed) <= set(prog.enumerate_schedules())


def test_a_schedule_gives_the_programs_results():
    prog = coconet.load(os.path.join(ROOT, "examples", "adam.coco"), sizes={"N": 64}, ranks=4)
    base = prog.run_cpu({"lr": 0.01, "t": 3.0})
    paper = prog.schedule("paper").run_cpu({"lr": 0.01, "t": 3.0})
    assert list(paper) == list(base) == ["p_"]
    np.testing.assert_array_equal(paper["p_"], base["p_"])


SMALL = """Size N = 6;
Tensor x(FP32, [N], Replicated, WORLD);
Tensor y(FP16, [N], Sliced(0), WORLD, RANK);
Tensor z(FP32, [N], Local, WORLD, RANK);
Scalar a(FP32);
Var s = AllReduce("+", z);
Var out = x * a + s;
Var half = y + y;
Execute small({x, y, z, a}, {out, half});
"""


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.coco"
    path.write_text(SMALL)
    return coconet.load(path, ranks=2)


def test_inputs_written_from_numpy(small):
    x = np.arange(6, dtype=np.float64) / 4
    z = [np.full(6, 1.5), np.linspace(-1, 1, 6)]
    y = [np.array([0.1, 0.2, 0.3]), np.array([1e5, -2.0, 65504.0])]
    out, ins = small.run_cpu({"x": x, "y": y, "z": z, "a": 2.0}, with_inputs=True)
    want = (x.astype(np.float32) * np.float32(2.0)) + (z[0] + z[1]).astype(np.float32)
    np.testing.assert_array_equal(out["out"], want.astype(np.float32))
    # FP16 inputs are rounded to FP16 (to nearest, ties to even; 1e5 overflows)
    np.testing.assert_array_equal(ins["y"][0], np.array([0.1, 0.2, 0.3], dtype=np.float16))
    assert np.isinf(ins["y"][1][0]) and ins["y"][1][2] == np.float16(65504.0)
    assert [h.shape for h in out["half"]] == [(3,), (3,)]
    np.testing.assert_array_equal(out["half"][0], (ins["y"][0] * np.float16(2)))
    assert out["half"][0].dtype == np.float16


def test_updated_tensors_come_back():
    prog = coconet.load(os.path.join(ROOT, "examples", "adam.coco"), sizes={"N": 16}, ranks=2)
    m = np.zeros(16)
    out, ins = prog.run_cpu({"m": m, "lr": 0.01, "t": 1.0}, with_inputs=True)
    np.testing.assert_array_equal(ins["p"], out["p_"])
    assert np.any(ins["m"] != 0)  # m's new value: (1 - beta1) * the summed gradient


def test_a_bad_program_raises_with_its_position(tmp_path):
    path = tmp_path / "bad.coco"
    path.write_text("Size N = 4;\nTensor x(FP32, [N], Replicated, WORLD);\nVar y = x + q;\n"
                    "Execute p({x}, {y});\n")
    with pytest.raises(coconet.CocoError) as e:
        coconet.load(path)
    assert (e.value.file, e.value.line, e.value.column) == (str(path), 3, 13)
    assert "q" in e.value.message


def test_bad_sizes_and_ranks_raise(tmp_path):
    path = os.path.join(ROOT, "examples", "adam.coco")
    with pytest.raises(coconet.CocoError):
        coconet.load(path, sizes={"M": 4})
    with pytest.raises(coconet.CocoError):
        coconet.load(path, sizes={"N": 0})
    with pytest.raises(TypeError):
        coconet.load(path, sizes={"N": "4"})
    with pytest.raises(coconet.CocoError):
        coconet.load(os.path.join(str(tmp_path), "missing.coco"))


def test_bad_inputs_name_the_tensor(small):
    with pytest.raises(coconet.CocoError, match=r"input 'x' on rank 0: expected shape \[6\].*got \[5\]"):
        small.run_cpu({"x": np.zeros(5)})
    with pytest.raises(coconet.CocoError, match=r"input 'y' is Sliced\(0\): expected a list of 2 arrays"):
        small.run_cpu({"y": np.zeros(6)})
    with pytest.raises(coconet.CocoError, match=r"'w' is not an input of program 'small'"):
        small.run_cpu({"w": np.zeros(6)})
    with pytest.raises(coconet.CocoError, match=r"no schedule|schedule"):
        small.schedule("nothing")


def test_a_sliced_new_value_comes_back_per_rank():
    """Under `paper`, Adam's m and v are asSliced: their new values stay on
    their ranks' slices, and joined they are the program's."""
    prog = coconet.load(os.path.join(ROOT, "examples", "adam.coco"), sizes={"N": 64}, ranks=4)
    _, base = prog.run_cpu({"lr": 0.01, "t": 2.0}, with_inputs=True)
    _, paper = prog.schedule("paper").run_cpu({"lr": 0.01, "t": 2.0}, with_inputs=True)
    assert isinstance(paper["m"], list) and len(paper["m"]) == 4
    np.testing.assert_array_equal(np.concatenate(paper["m"]), base["m"])
    np.testing.assert_array_equal(paper["p"], base["p"])


def test_a_constant_scalar_keeps_its_value(tmp_path):
    """A Scalar declared with a value is a constant (the generated code holds
    it): the same value may be given, another one is refused by name."""
    path = tmp_path / "k.coco"
    path.write_text('Tensor x(FP32, [4], Replicated, WORLD);\nScalar k(FP32, 2);\n'
                    'Var y = x * k;\nExecute k_prog({x, k}, {y});\n')
    prog = coconet.load(str(path), ranks=1)
    x = np.arange(4, dtype=np.float32)
    assert np.array_equal(prog.run_cpu({"x": x, "k": 2.0})["y"], 2 * x)
    with pytest.raises(coconet.CocoError, match=r"scalar 'k' is the constant 2 .* 3 was given"):
        prog.run_cpu({"x": x, "k": 3.0})
