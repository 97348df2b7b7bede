"""test_log.py: what the package says goes through logging and warnings,
once: a condition met again does not warn again (coconet._log.warn_once);
a build's progress is INFO on the "coconet" logger where logging has a
handler, else a line on stderr; and coco_build_cuda calls the package's
on_build as nvcc starts, once a build (not when the cache serves), with a
stand-in nvcc (a script that writes an empty object) and nccl.h."""
import logging
import os
import warnings

import pytest

import coconet
from coconet import _log
from coconet import _session as S

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE_NVCC = """#!/bin/sh
[ "$1" = "--version" ] && { echo "Cuda compilation tools, release 0.0, V0.0.0"; exit 0; }
out=
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out=$2; shift; done
[ -n "$out" ] && : > "$out"
"""


@pytest.fixture
def no_handlers(monkeypatch):
    """A coconet logger with no handler to reach, as where the application
    configured none (pytest's logging plugin puts handlers on the real one)."""
    monkeypatch.setattr(_log, "log", logging.Logger("coconet"))


def test_a_repeated_condition_warns_once(monkeypatch):
    monkeypatch.setattr(_log, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the filter would hide repeats; warn_once must
        for _ in range(3):
            _log.warn_once(("outside the arena", "a.so", "paper"), "first")
        _log.warn_once(("outside the arena", "b.so", "paper"), "second")
    assert [str(w.message) for w in caught] == ["first", "second"]
    assert all(w.category is UserWarning for w in caught)


def test_progress_goes_to_the_logger_when_configured(caplog, capsys):
    with caplog.at_level(logging.INFO, logger="coconet"):
        _log.progress("building x.so with nvcc")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == \
        [("coconet", "INFO", "building x.so with nvcc")]
    assert capsys.readouterr().err == ""


def test_progress_on_stderr_without_logging(no_handlers, capsys):
    _log.progress("building x.so with nvcc")
    assert capsys.readouterr().err == "coconet: building x.so with nvcc\n"


def test_a_build_says_so_once(tmp_path, monkeypatch, caplog):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    (tmp_path / "nccl" / "include").mkdir(parents=True)
    (tmp_path / "nccl" / "include" / "nccl.h").write_text("#define NCCL_VERSION_CODE 22809\n")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setenv("NCCL_HOME", str(tmp_path / "nccl"))
    monkeypatch.setenv("COCONET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COCONET_HOME", ROOT)  # the headers generated code includes
    # no cuda.conf beside this runtime path (build/cuda.conf's NVCC would be taken)
    monkeypatch.setenv("COCONET_CUDA_RUNTIME", str(tmp_path / "libcoconet_cuda.so"))
    p = coconet.load(os.path.join(ROOT, "examples", "adam.coco"), sizes={"N": 64}, ranks=1)
    with caplog.at_level(logging.INFO, logger="coconet"):
        first = S.build(p, "program")
        again = S.build(p, "program")
    assert first.so == again.so and os.path.exists(first.so)
    said = [r.getMessage() for r in caplog.records if r.name == "coconet"]
    assert said == ["building %s with nvcc (once for this source; minutes for a large program)"
                    % first.so]
