"""test_torch_comm.py: whose NCCL communicator a coconet.torch session's
WORLD is (coconet.torch._comm): PyTorch's where its process group is an
NCCL one that exposes its communicator and calls the runtime's NCCL
library, else the session's own, with the reason; the session layer
passes an adopted communicator to the runtime (the stand-in runtime,
build/fake/libfake_rt.so, says whose WORLD is). Process groups and
libraries are stand-ins here; tests/gpu/torch_check.py's `comm` checks
the real ones. Skipped without torch."""
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from coconet import _session as S  # noqa: E402
from coconet.torch import _comm  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE = os.path.join(ROOT, "build", "fake", "libfake_rt.so")
DEV = torch.device("cuda", 0)


class NcclBackend:
    def __init__(self, ptr):
        self.ptr = ptr

    def _comm_ptr(self):
        return self.ptr


class Group:
    """A process group whose NCCL backend is `backend`."""

    def __init__(self, backend):
        self.backend = backend

    def _get_backend(self, device):
        return self.backend


@pytest.fixture
def nccl_group(monkeypatch):
    """torch.distributed initialised with an NCCL group whose communicator
    is at 0xc0c0, PyTorch's NCCL the runtime's, one rank (no all-reduce)."""
    monkeypatch.setenv("COCONET_TORCH_COMM", "1")  # not 0: adopt
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(_comm, "same_library", lambda runtime: None)
    monkeypatch.setattr(_comm, "_agree", lambda ok, group, device: ok)
    return Group(NcclBackend(0xc0c0))


def test_torch_communicator_adopted(nccl_group):
    ptr, what = _comm.world_comm(nccl_group, DEV, None, 1, 2)
    assert ptr == 0xc0c0
    assert what == "PyTorch's ProcessGroupNCCL communicator (rank 1 of 2)"


def test_adopted_by_default(nccl_group, monkeypatch):
    monkeypatch.delenv("COCONET_TORCH_COMM")
    assert _comm.world_comm(nccl_group, DEV, None, 0, 1)[0] == 0xc0c0


def test_switched_off(nccl_group, monkeypatch):
    """COCONET_TORCH_COMM=0: the session opens its own"""
    monkeypatch.setenv("COCONET_TORCH_COMM", "0")
    assert _comm.world_comm(nccl_group, DEV, None, 0, 1) == \
        (0, "COCONET_TORCH_COMM=0 asks for the session's own")


def test_not_nccl(nccl_group, monkeypatch):
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    assert _comm.world_comm(nccl_group, DEV, None, 0, 1) == \
        (0, "the process group's backend is gloo, not nccl")


def test_no_process_group(monkeypatch):
    monkeypatch.setenv("COCONET_TORCH_COMM", "1")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert _comm.world_comm(None, DEV, None, 0, 1) == (0, "no torch.distributed process group")


def test_torch_without_comm_ptr(nccl_group):
    ptr, why = _comm.world_comm(Group(object()), DEV, None, 0, 1)
    assert ptr == 0 and "does not expose its communicator" in why


def test_another_nccl_library(nccl_group, monkeypatch):
    monkeypatch.setattr(_comm, "same_library", lambda runtime: "PyTorch's NCCL is 22903")
    assert _comm.world_comm(nccl_group, DEV, None, 0, 1) == (0, "PyTorch's NCCL is 22903")


def test_another_rank_cannot(nccl_group, monkeypatch):
    monkeypatch.setattr(_comm, "_agree", lambda ok, group, device: False)
    assert _comm.world_comm(nccl_group, DEV, None, 0, 2) == \
        (0, "another rank cannot adopt PyTorch's communicator")


def test_no_communicator_yet(nccl_group):
    ptr, why = _comm.world_comm(Group(NcclBackend(0)), DEV, None, 0, 1)
    assert ptr == 0 and why == "PyTorch's ProcessGroupNCCL has no communicator on GPU 0"


class Runtime:
    lib = None

    def __init__(self, loaded):
        self.loaded = loaded

    def nccl(self):
        return self.loaded


def test_same_library(monkeypatch):
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 28, 9))
    monkeypatch.setattr(_comm, "_torch_cuda_lib", lambda: "torch")
    addresses = {None: 0x100, "torch": 0x100}
    monkeypatch.setattr(_comm, "_symbol", lambda lib: addresses[lib])
    rt = Runtime(("/wheel/libnccl.so.2", 22809))
    assert _comm.same_library(rt) is None
    addresses["torch"] = 0x200  # another copy of NCCL 2.28.9 (static in PyTorch)
    assert "PyTorch's NCCL calls do not bind to /wheel/libnccl.so.2" in _comm.same_library(rt)
    assert _comm.same_library(Runtime(("/other/libnccl.so.2", 22803))) == \
        "PyTorch's NCCL is 22809, the runtime's 22803 (/other/libnccl.so.2)"
    assert _comm.same_library(Runtime(None)) == "the runtime calls no NCCL library"


@pytest.mark.skipif(not os.path.exists(FAKE), reason="no build/fake/libfake_rt.so")
def test_session_adopts_the_communicator():
    rt = S.Runtime(FAKE)
    own = S.Session(rt, 0, 1, 0, rt.unique_id())
    assert "WORLD: the session's own communicator" in own.describe()
    assert not own.world_adopted
    adopted = S.Session(rt, 0, 1, 0, bytes(S.ID_BYTES), world=0xc0c0)  # the id unused
    assert "WORLD: the caller's communicator" in adopted.describe()
    assert adopted.world_adopted
    own.close()
    adopted.close()
