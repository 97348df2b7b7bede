"""test_setup.py: python/setup.py's choice of what to build, on made-up
trees: PyTorch's NCCL wheel found beside torch, an NCCL without the device
API or older than 2.28 refused with what to do, COCONET_NCCL_HOME taken
before PyTorch's, COCONET_GPU=0 and =1."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def setup_py():
    spec = importlib.util.spec_from_file_location("coconet_setup",
                                                  os.path.join(ROOT, "python", "setup.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # not __main__: setup() does not run
    return mod


def _nccl(prefix, version, device_api=True):
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "include" / "nccl.h").write_text("#define NCCL_VERSION_CODE %d\n" % version)
    if device_api:
        (prefix / "include" / "nccl_device.h").write_text("\n")
    return prefix


def test_torch_nccl(setup_py, tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    monkeypatch.delenv("COCONET_NCCL_HOME", raising=False)
    monkeypatch.setattr(setup_py, "site_dirs", lambda: [str(tmp_path / "empty"), str(site)])
    assert setup_py.nccl_choice()[0] is None  # no torch
    prefix = _nccl(site / "nvidia" / "nccl", 22809)
    assert setup_py.nccl_choice()[0] is None  # its NCCL wheel but no torch beside it
    (site / "torch").mkdir()
    found, what = setup_py.nccl_choice()
    assert found == str(prefix) and what.startswith("PyTorch's NCCL 2.28.9")


@pytest.mark.parametrize("version,device_api", [(22709, True), (22809, False)])
def test_nccl_refused(setup_py, tmp_path, monkeypatch, version, device_api):
    monkeypatch.setenv("COCONET_NCCL_HOME", str(_nccl(tmp_path / "nccl", version, device_api)))
    found, why = setup_py.nccl_choice()
    assert found is None
    assert "without the device API" in why and "COCONET_NCCL_HOME to an NCCL >= 2.28" in why


def test_nccl_home_first(setup_py, tmp_path, monkeypatch):
    mine = _nccl(tmp_path / "mine", 22903)
    monkeypatch.setenv("COCONET_NCCL_HOME", str(mine))
    monkeypatch.setattr(setup_py, "torch_nccl", lambda: pytest.fail("PyTorch's was looked for"))
    assert setup_py.nccl_choice() == (str(mine), "COCONET_NCCL_HOME NCCL 2.29.3 (%s)" % mine)


def test_gpu_switch(setup_py, monkeypatch):
    monkeypatch.setattr(setup_py, "find_nvcc", lambda: None)
    monkeypatch.setenv("COCONET_GPU", "0")
    assert setup_py.gpu_plan() is None
    monkeypatch.delenv("COCONET_GPU")
    assert setup_py.gpu_plan() is None  # no nvcc: the CPU package
    monkeypatch.setenv("COCONET_GPU", "1")
    with pytest.raises(RuntimeError, match="COCONET_GPU=1 but the GPU runtime cannot be "
                                           "built: no nvcc"):
        setup_py.gpu_plan()
