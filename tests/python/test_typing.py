"""test_typing.py: the package's public API keeps its type hints, and mypy
finds no issue in the package. Public API: every public function of the
modules below (their __all__, else their public names defined there), and
every public method (and __init__, __call__) of their public classes,
mixins defined in coconet included; each must annotate every parameter but
self and cls, and its return. coconet.torch's modules are checked where
torch is installed (skipped otherwise), mypy's run where mypy is (the
torch-free modules alone where torch is not)."""
import importlib
import inspect
import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
TORCH_FREE = ["coconet", "coconet.programs", "coconet.tp_programs"]
TORCH = ["coconet.torch", "coconet.torch.nn", "coconet.torch.tp", "coconet.torch.optim",
         "coconet.torch.ops", "coconet.torch.watch"]


def has(module):
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and
                 getattr(v, "__module__", None) == module.__name__]
    return names


def unannotated(fn):
    """The parameters (and 'return') of fn without a hint."""
    fn = inspect.unwrap(fn)
    sig = inspect.signature(fn)
    missing = [p.name for p in sig.parameters.values()
               if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def methods(cls):
    """(qualified name, function) of cls's public methods defined in coconet."""
    seen = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("coconet"):
            continue
        for name, v in vars(klass).items():
            if name in seen or (name.startswith("_") and name not in ("__init__", "__call__")):
                continue
            seen.add(name)
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if inspect.isfunction(v):
                yield "%s.%s" % (cls.__qualname__, name), v


def missing_hints(module_name):
    module = importlib.import_module(module_name)
    bad = []
    for name in public_names(module):
        v = getattr(module, name)
        if inspect.isclass(v) and v.__module__.startswith("coconet"):
            bad += ["%s %s" % (q, unannotated(f)) for q, f in methods(v) if unannotated(f)]
        elif inspect.isfunction(v) and unannotated(v):
            bad.append("%s %s" % (name, unannotated(v)))
    return ["%s.%s" % (module_name, b) for b in bad]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_torch_free_api_has_hints(module):
    assert missing_hints(module) == []


@pytest.mark.parametrize("module", TORCH)
def test_torch_api_has_hints(module):
    pytest.importorskip("torch")
    assert missing_hints(module) == []


def test_a_function_without_hints_is_found():
    def f(a, b: int):
        return a
    assert unannotated(f) == ["a", "return"]


def test_mypy_finds_no_issue(tmp_path):
    if not has("mypy"):
        pytest.skip("mypy is not installed (pip install -r tests/requirements.txt)")
    if has("torch"):
        targets = ["-p", "coconet"]
    else:  # coconet.torch needs torch to be checked; check.py imports it if it is there
        targets = ["--ignore-missing-imports"] + [
            os.path.join("coconet", f) for f in sorted(os.listdir(
                os.path.join(PYTHON_DIR, "coconet"))) if f.endswith(".py")]
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)] + targets,
                       cwd=PYTHON_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    assert r.returncode == 0, r.stdout
