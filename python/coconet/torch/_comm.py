"""coconet.torch._comm: whose NCCL communicator a session's WORLD is.

A session's NCCL paths (collectives whose tensors lie outside the arena,
COCONET_FUSED=nccl, the GROUP and window communicators split from WORLD)
run on WORLD. Where the process group is PyTorch's NCCL one, PyTorch
exposes its communicator (ProcessGroupNCCL._comm_ptr, PyTorch 2.8 and
later), and PyTorch's NCCL calls bind to the very library the runtime's
do (the same ncclGetVersion: one library, not two copies of one
version), the session adopts that communicator as WORLD and opens no
second one; PyTorch keeps owning it (the session never destroys it).
Otherwise the session opens its own from rank 0's unique id, as before,
and the reason is logged (DEBUG on the coconet.torch logger), as is the
choice. COCONET_TORCH_COMM=0 asks the session to open its own always
(a way around a fault in adoption; an adopted WORLD also carries the
GROUP and window communicators split from it).

Every rank of the group must decide alike (a rank opening its own
communicator waits for all the others): the ranks agree on the choice
with one all-reduce (MIN) on the group, which also makes PyTorch's
communicator where it is made lazily, at its first collective.

Invariant of an adopted WORLD: coconet's NCCL calls and PyTorch's go to
one communicator, so every rank must enqueue them in the same order, as
it must for any two collectives of one process group."""
import ctypes
import logging
import os
from typing import Any, Optional, Tuple

import torch
import torch.distributed as dist

log = logging.getLogger("coconet.torch")


def _symbol(lib: Any, name: str = "ncclGetVersion") -> Optional[int]:
    """The address `name` resolves to through a loaded library (its own
    or its dependencies'), or None."""
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _torch_cuda_lib() -> Any:
    """PyTorch's CUDA library (libtorch_cuda.so), whose NCCL calls are
    ProcessGroupNCCL's, or None."""
    try:
        return ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                        "libtorch_cuda.so"))
    except OSError:
        return None


def _version_code(v: Tuple[int, ...]) -> int:
    return v[0] * 10000 + v[1] * 100 + (v[2] if len(v) > 2 else 0)


def same_library(runtime: Any) -> Optional[str]:
    """None when PyTorch's NCCL calls bind to the library the runtime's do,
    else why not."""
    loaded = runtime.nccl()
    if loaded is None:
        return "the runtime calls no NCCL library"
    try:
        theirs = _version_code(tuple(torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError, TypeError):
        return "PyTorch reports no NCCL version"
    if theirs != loaded[1]:
        return ("PyTorch's NCCL is %d, the runtime's %d (%s)" % (theirs, loaded[1], loaded[0]))
    torch_lib = _torch_cuda_lib()
    ours, their_fn = _symbol(runtime.lib), _symbol(torch_lib) if torch_lib else None
    if ours is None or their_fn is None or ours != their_fn:
        return ("PyTorch's NCCL calls do not bind to %s (its NCCL linked in statically, or "
                "another copy)" % loaded[0])
    return None


def _nccl_backend(group: Any, device: torch.device) -> Tuple[Any, Optional[str]]:
    """(PyTorch's ProcessGroupNCCL of the group, None), or (None, why not)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None, "no torch.distributed process group"
    name = dist.get_backend(group)
    if name != "nccl":
        return None, "the process group's backend is %s, not nccl" % name
    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        return None, "no default process group"
    try:
        backend = pg._get_backend(device)
    except (AttributeError, RuntimeError) as e:
        return None, "PyTorch gives no NCCL backend of the group (%s)" % e
    if not callable(getattr(backend, "_comm_ptr", None)):
        return None, ("this PyTorch does not expose its communicator "
                      "(ProcessGroupNCCL._comm_ptr: PyTorch 2.8 and later)")
    return backend, None


def _agree(ok: bool, group: Any, device: torch.device) -> bool:
    """Do all the group's ranks say ok? (an all-reduce MIN on the group)."""
    t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def world_comm(group: Any, device: torch.device, runtime: Any, rank: int,
               nranks: int) -> Tuple[int, str]:
    """(the address of PyTorch's ncclComm_t for the session to adopt as
    WORLD, what it is), or (0, why the session opens its own). Collective
    where the group is PyTorch's NCCL one (see the module's documentation)."""
    if os.environ.get("COCONET_TORCH_COMM", "") == "0":
        return 0, "COCONET_TORCH_COMM=0 asks for the session's own"
    backend, why = _nccl_backend(group, device)
    if backend is None:
        return 0, why or ""
    why = same_library(runtime)
    if not _agree(why is None, group, device):  # also makes a lazily made communicator
        return 0, why or "another rank cannot adopt PyTorch's communicator"
    ptr = int(backend._comm_ptr() or 0)
    if not _agree(ptr != 0, group, device):
        if ptr:
            return 0, "another rank finds no communicator of PyTorch's"
        return 0, "PyTorch's ProcessGroupNCCL has no communicator on GPU %d" % device.index
    return ptr, "PyTorch's ProcessGroupNCCL communicator (rank %d of %d)" % (rank, nranks)
