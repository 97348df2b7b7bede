"""coconet.torch: coconet programs called on PyTorch tensors, under torchrun.

    import torch, torch.distributed as dist, coconet.torch as ct
    dist.init_process_group("nccl"); torch.cuda.set_device(local_rank)
    f = ct.compile("examples/adam.coco", schedule="paper", sizes={"N": 1 << 20})
    p = ct.empty(f.spec.input("p").shape, torch.float32)   # in the arena
    ...
    f(g=g, p=p, m=m, v=v, lr=1e-3, t=1.0)                  # p, m, v updated in place

One session per process group: its NCCL WORLD is PyTorch's own
communicator where the group is PyTorch's NCCL one (and COCONET_TORCH_COMM
is not 0), PyTorch exposes it and both call one NCCL library
(coconet.torch._comm; session(group).world says which), else coconet's own (rank 0's NCCL unique id broadcast with
torch.distributed); the GROUP and window communicators, cuBLASLt, and the
arena, a symmetric NCCL window from which ct.empty hands out tensors
(ct.arena_bytes() reports its size and use: a device allocation that
torch.cuda.memory_allocated does not count). ct.broadcast_module(model)
gives every rank rank 0's parameters and buffers, as DDP does at its start. A
compiled callable takes tensors by name, checks each one's element type,
shape (as this rank holds it), device and contiguity (an error names the
tensor, what was expected and what was given), enqueues the variant on
torch.cuda.current_stream() with no host synchronisation, updates Updated
tensors in place and returns its outputs in tensors of the arena, made once
and reused by every call (copy them to keep a value past the next call).
f.bind(tensors) checks the tensors once and returns a Bound, whose calls
take only the Scalars: a hot loop over the same tensors (the optimizers'
step, 148 tensors for GPT-2 small) then pays no Python check per tensor.

Tensors outside the arena are used where they lie, but for those a
variant's one-kernel collectives reach in the other ranks' memory (the
generated object lists them: coco_window_inputs__V, include/coconet_cuda.h):
at P > 1 a call given one of those outside the arena is refused, naming it,
since a rank taking the NCCL path while the others take the kernels would
hang them; compile(..., nccl_path=True) accepts them, and every rank must
then pass its tensors alike (the collective takes its NCCL path; a warning
says so once).

CUDA graphs: a call enqueues only kernels, NCCL and cuBLASLt calls on the
current stream (and on a side stream joined by events), so it can be
captured, once a first call with the same sizes has made its workspace and
tables (a call during capture before that is refused). A variant that
overlaps a MatMul with a collective in chunks clears its chunks' flags on
the stream at each launch, so a replay waits for each chunk as the call
did. One limit: the seed of Dropout is fixed at capture (every replay draws
the same masks).

torch.compile and export: every call is a torch.library custom op
(coconet::call; RowParallelLinear's forward coconet::row_parallel, with
its autograd; the passes of coconet.torch.tp's layers coconet::tp_pass, in
coconet.torch.tp_ops), taken when the call is traced (under torch.compile or
torch.export, or on fake or meta tensors; coconet.torch.ops says how);
eager calls on plain tensors keep the direct path. A Scalar given as a CPU
tensor changes without recompiling the graph.

Which NCCL: PyTorch loads its own libnccl.so.2 (its wheel's nvidia/nccl)
when imported; the runtime `pip install ./python` builds links that same
library and is built with its headers, so PyTorch and coconet share one
NCCL with no preload. Any runtime and the generated code, loaded after
PyTorch, bind to the loaded library by its soname whatever their rpath
says, and NCCL's device API has no ABI promise across versions, so the
generated code must be built with the headers of the library loaded:
coconet.torch asks the runtime which library its NCCL calls bind to
(coco_session_nccl) and builds against the runtime's headers (its
cuda.conf) when the versions agree, else against headers next to the
loaded library (prefix/include with nccl_device.h, as NVIDIA's wheel ships
them), else it stops and says how to rebuild coconet against the loaded
NCCL."""
import os
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Union

import torch
import torch.distributed as dist

from .. import CocoError, load
from .. import _log
from .. import _session as S
from . import _comm
from ._build import build_locked as _build_locked  # one rank of a machine at a time
from . import ops as _ops
from .watch import Stalled, Watchdog  # noqa: F401 (Watchdog: tests, tools)

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["CocoError", "Stalled", "Compiled", "Bound", "compile", "empty", "zeros",
           "to_arena", "in_arena", "session", "is_open", "synchronize", "arena_bytes",
           "broadcast_module", "GradScaler", "clip_grad_norm_"]

TORCH_TYPES = {"FP16": torch.float16, "BF16": torch.bfloat16, "FP32": torch.float32,
               "FP64": torch.float64}
TYPE_NAMES = {v: k for k, v in TORCH_TYPES.items()}
DEFAULT_ARENA = 4 << 30

# A call's argument: a tensor, a scattered input's members, or a Scalar's
# number (a one-element CPU tensor too).
Value = Union[torch.Tensor, Sequence[torch.Tensor], float, int]
# A call's result: the output's tensor, or the outputs by name (a
# scattered Updated input's new value: its members).
Result = Union[torch.Tensor, Dict[str, Any]]
Shape = Union[int, Sequence[int]]


# ---- sessions, one per process group ----

class _Group:
    """A process group's session: its rank, size and device, and its arena."""

    def __init__(self, group, arena_bytes):
        if dist.is_available() and dist.is_initialized():
            self.rank, self.nranks = dist.get_rank(group), dist.get_world_size(group)
        elif group is not None:
            raise CocoError("coconet.torch: a process group was given but torch.distributed "
                            "is not initialised")
        else:
            self.rank, self.nranks = 0, 1
        self.group = group
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.runtime = S.Runtime()
        self.nccl_home = S.nccl_setup(self.runtime.path, self.runtime.nccl())
        # WORLD: PyTorch's communicator where it can be adopted (coconet.torch._comm)
        world, why = _comm.world_comm(group, self.device, self.runtime, self.rank,
                                      self.nranks)
        self.world = why if world else "the session's own communicator (%s)" % why
        nccl_id = bytes(S.ID_BYTES) if world else self._unique_id()
        env = os.environ.get("COCONET_ARENA_BYTES")
        if arena_bytes is None:
            arena_bytes = int(env) if env else DEFAULT_ARENA
        self.timeout_s = float(os.environ.get("COCONET_TIMEOUT") or 300)
        self.session = S.Session(self.runtime, self.rank, self.nranks, self.device.index,
                                 nccl_id, arena_bytes=arena_bytes, timeout_s=self.timeout_s,
                                 world=world)
        _comm.log.debug("coconet.torch: rank %d: WORLD is %s", self.rank, self.world)
        self.watch = Watchdog(self.rank, self.timeout_s)  # coconet.torch.watch

    def _unique_id(self):
        """Rank 0's NCCL unique id, on every rank (torch.distributed.broadcast)."""
        uid = self.runtime.unique_id() if self.rank == 0 else bytes(S.ID_BYTES)
        if self.nranks == 1:
            return uid
        backend = dist.get_backend(self.group)
        dev = self.device if backend == "nccl" else torch.device("cpu")
        t = torch.tensor(list(uid), dtype=torch.uint8, device=dev)
        src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
        dist.broadcast(t, src=src, group=self.group)
        return bytes(t.cpu().tolist())


_groups: Dict[Optional[int], _Group] = {}


def is_open(group: "Optional[ProcessGroup]" = None) -> bool:
    """Has the session of this process group been opened?"""
    return (id(group) if group is not None else None) in _groups


def session(group: "Optional[ProcessGroup]" = None,
            arena_bytes: Optional[int] = None) -> _Group:
    """The coconet session of a process group (None: the default group),
    opened at its first use; arena_bytes (default COCONET_ARENA_BYTES, else
    4 GiB) applies to that first use only."""
    key = id(group) if group is not None else None
    g = _groups.get(key)
    if g is None:
        g = _groups[key] = _Group(group, arena_bytes)
    elif arena_bytes is not None and (int(arena_bytes) + 511) // 512 * 512 != g.session.arena()[1]:
        raise CocoError("coconet.torch: the session of this group is already open with an "
                        "arena of %d bytes; arena_bytes applies to its first use only"
                        % g.session.arena()[1])
    return g


def synchronize(group: "Optional[ProcessGroup]" = None) -> None:
    """Waits for the current stream, as torch.cuda.synchronize, but within
    the session's timeout (COCONET_TIMEOUT): raises Stalled naming the rank
    when its work does not complete (a peer died, a kernel stalls)."""
    g = session(group)
    try:
        g.session.wait(torch.cuda.current_stream(g.device).cuda_stream)
    except CocoError as e:
        raise Stalled("coconet.torch: %s (COCONET_TIMEOUT=%g s)" % (e, g.timeout_s)) from None


def arena_bytes(group: "Optional[ProcessGroup]" = None) -> Dict[str, int]:
    """The arena of this process group's session, in bytes on this rank's
    GPU: {"size": reserved at the session's start (a device allocation of
    its own, which torch.cuda.memory_allocated does not count), "used":
    handed out to tensors so far}. Add "size" to torch's figures to count a
    run's GPU memory."""
    _, size, used = session(group).session.arena()
    return {"size": int(size), "used": int(used)}


def broadcast_module(module: torch.nn.Module,
                     group: "Optional[ProcessGroup]" = None) -> None:
    """Rank 0's parameters and buffers (BatchNorm's statistics) on every
    rank of the group, in place, as DDP does at its construction; call it
    once, on every rank, before training (coconet.torch.optim broadcasts the
    parameters it trains by itself, but not the buffers)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return
    src = dist.get_global_rank(group, 0) if group is not None else 0
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src=src, group=group)


# ---- tensors in the arena ----

class _ArenaBlock:
    """Arena memory as __cuda_array_interface__ bytes, for torch.as_tensor
    (no copy; torch keeps this object alive with the tensor)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


def empty(shape: Shape, dtype: torch.dtype,
          group: "Optional[ProcessGroup]" = None) -> torch.Tensor:
    """A tensor of the arena (contiguous, on this rank's GPU); collective:
    every rank of the group makes the same ones in the same order. Arena
    memory is given back only when the process ends."""
    g = session(group)
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list, torch.Size))
                                   else (shape,)))
    n = 1
    for d in shape:
        n *= d
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    ptr = g.session.alloc(max(nbytes, 1))
    raw = torch.as_tensor(_ArenaBlock(ptr, max(nbytes, 1)), device=g.device)
    if raw.data_ptr() != ptr:  # torch copied it: the tensor would not be in the arena
        raise CocoError("coconet.torch: torch.as_tensor copied arena memory at 0x%x (to 0x%x, "
                        "%s) instead of wrapping it" % (ptr, raw.data_ptr(), raw.device))
    return raw[:nbytes].view(dtype).view(shape)


def zeros(shape: Shape, dtype: torch.dtype,
          group: "Optional[ProcessGroup]" = None) -> torch.Tensor:
    """empty(shape, dtype, group), zeroed."""
    t = empty(shape, dtype, group)
    t.zero_()
    return t


def to_arena(t: torch.Tensor, group: "Optional[ProcessGroup]" = None) -> torch.Tensor:
    """A copy of t in the arena."""
    out = empty(t.shape, t.dtype, group)
    out.copy_(t)
    return out


def in_arena(t: torch.Tensor, group: "Optional[ProcessGroup]" = None) -> bool:
    """Does t's storage lie in the arena of this group's session?"""
    g = session(group)
    return g.session.in_arena(t.data_ptr(), t.numel() * t.element_size())


class Compiled:
    """A program variant callable on torch tensors (see the module's
    documentation). Attributes: spec (S.VariantSpec: each argument's type
    and shape on this rank), variant, so (the shared object), note."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], schedule: str = "program",
                 sizes: Optional[Mapping[str, int]] = None,
                 group: "Optional[ProcessGroup]" = None, seed: int = 0,
                 _base: Optional["Compiled"] = None, nccl_path: bool = False) -> None:
        self.group: _Group = _base.group if _base else session(group)
        g = self.group
        self.path = str(path)
        self.sizes = dict(sizes or {})
        self.program = load(self.path, sizes=sizes, ranks=g.nranks)
        if _base is None:
            built = _build_locked(self.program, schedule, g.nccl_home)
            if built.note:
                _log.warn_once(("note", built.note), "coconet.torch: " + built.note)
            self.so, self.variant, self.note = built.so, built.variant, built.note
            self._knobs = S.parse_knobs(built.knobs)
            self.module = g.session.load(self.so)
            self._shapes: Dict[tuple, Compiled] = {}
            self._window = S.window_args(self.so, self.variant)
            self._nccl_path = bool(nccl_path)
        else:  # the same object at other sizes: generated code takes sizes at run time
            self.so, self.variant, self.note = _base.so, _base.variant, _base.note
            self._knobs, self.module, self._shapes = _base._knobs, _base.module, _base._shapes
            self._window, self._nccl_path = _base._window, _base._nccl_path
        self.spec = S.VariantSpec(self.program, self.variant, g.rank)
        self._device_index = g.device.index  # _matches
        self._call = S.Call(g.session, self.module, self.spec, *self._knobs)
        self._seed = int(seed)
        self._warm = False
        self._warned = False
        self._outputs = None  # made in the arena at the first call that needs them
        # the outputs as _matches reads arguments (out=): _output_tensor's
        self._out_specs = [S.InputSpec(o.name, "tensor", o.type, o.shape, ())
                           for o in self.spec.outputs]
        self._key = _ops.register(self)  # coconet::call's handle on it

    def at(self, sizes: Mapping[str, int]) -> "Compiled":
        """The same variant at other sizes (no new build: the generated code
        takes its sizes at run time), kept for later calls with them."""
        key = tuple(sorted(dict(self.sizes, **sizes).items()))
        c = self._shapes.get(key)
        if c is None:
            c = self._shapes[key] = Compiled(self.path, sizes=dict(key), _base=self,
                                             seed=self._seed)
        return c

    def __repr__(self):
        return "<coconet.torch.Compiled %s [%s] rank %d of %d>" % (
            self.path, self.variant, self.group.rank, self.group.nranks)

    def _matches(self, spec, t, member=None):
        """Is tensor t what argument `spec` (its member `member`) must be:
        element type, shape (a member: element count), contiguous, on this
        rank's GPU? A few comparisons, a call's usual case; the worded check
        (spec.check_tensor) runs only on a mismatch."""
        if t.dtype is not TORCH_TYPES.get(spec.type):
            return False
        if member is None:
            if t.shape != tuple(spec.shape):
                return False
        elif t.numel() != spec.members[member]:
            return False
        return t.is_contiguous() and t.get_device() == self._device_index

    def _tensor(self, spec, t, member=None):
        if isinstance(t, torch.Tensor) and self._matches(spec, t, member):
            return t.data_ptr()
        if not isinstance(t, torch.Tensor):
            raise CocoError("input '%s' of '%s' (rank %d): expected %s; given %s"
                            % (spec.name, self.variant, self.group.rank, self.spec.expect(spec),
                               type(t).__name__))
        self.spec.check_tensor(spec, TYPE_NAMES.get(t.dtype, t.dtype), t.shape,
                               t.is_contiguous(), t.device == self.group.device, t.device,
                               member)
        return t.data_ptr()

    def _scalar(self, c, i, spec, value):
        """A Python number, or a one-element CPU tensor (as a compiled graph
        passes a changing Scalar; a GPU tensor would need a host sync)."""
        if isinstance(value, torch.Tensor) and value.device.type == "cpu" and \
                value.numel() == 1:
            value = value.item()
        if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)):
            raise CocoError("input '%s' of '%s' (rank %d): expected a number (a Python "
                            "int or float, or a one-element CPU tensor: a GPU tensor would "
                            "need a host sync); given %s"
                            % (spec.name, self.variant, self.group.rank,
                               "a tensor on %s" % value.device
                               if isinstance(value, torch.Tensor) else type(value).__name__))
        value = S.round_scalar(value, spec.type)  # as the program's type holds it
        if spec.constant is not None and value != spec.constant:
            raise CocoError("input '%s' of '%s' (rank %d): the program declares it the constant "
                            "%r, and %r was given: declare it without a value to make it an "
                            "input" % (spec.name, self.variant, self.group.rank, spec.constant,
                                       value))
        c.scalars[i] = value

    def _set(self, c, i, spec, value):
        """Input i's value into call c's arrays, checked."""
        if spec.kind == "scalar":
            self._scalar(c, i, spec, value)
        elif spec.kind == "scattered":
            if not isinstance(value, (list, tuple)):
                raise CocoError("input '%s' of '%s' (rank %d): expected %s; given %s"
                                % (spec.name, self.variant, self.group.rank,
                                   self.spec.expect(spec), type(value).__name__))
            self.spec.check_members(spec, len(value))
            arr = c.member_arrays[i]
            for k, t in enumerate(value):
                arr[k] = self._tensor(spec, t, k)
            c.inputs[i] = arr[0] if len(value) else None
        else:
            c.inputs[i] = self._tensor(spec, value)

    def _check_window(self, by_name, results):
        """Refuses a tensor outside the arena that the variant's one-kernel
        collectives reach in the other ranks' memory (see compile)."""
        def refuse(what):
            raise CocoError("%s of '%s' (rank %d) lies outside the arena, but the variant's "
                            "one-kernel collective reaches it in the other ranks' memory: "
                            "make it in the arena on every rank (coconet.torch.empty, "
                            "to_arena), or compile with nccl_path=True and pass every rank's "
                            "alike (that collective then takes its NCCL path)"
                            % (what, self.variant, self.group.rank))
        def inside(t):
            return self.group.session.in_arena(t.data_ptr(), t.numel() * t.element_size())
        inputs, outputs = self._window
        for i in sorted(inputs):
            spec, value = self.spec.inputs[i], by_name[i]
            tensors = value if spec.kind == "scattered" else [value]
            for k, t in enumerate(tensors):
                if not inside(t):
                    refuse("input '%s'%s" % (spec.name, " (member %d)" % k
                                             if spec.kind == "scattered" else ""))
        for k in sorted(outputs):
            t = results[k]
            if isinstance(t, torch.Tensor) and not inside(t):
                refuse("output '%s'" % self.spec.outputs[k].name)

    def _output_tensor(self, k, o, out):
        """Output k: the tensor given for it in `out` (checked), else the
        call's own in the arena (made at the first call that needs it)."""
        if out is not None and o.name in out:
            t = out[o.name]
            spec = self._out_specs[k]
            if isinstance(t, torch.Tensor) and self._matches(spec, t):
                return t
            if not isinstance(t, torch.Tensor):
                raise CocoError("output '%s' of '%s': expected a tensor; given %s"
                                % (o.name, self.variant, type(t).__name__))
            self.spec.check_tensor(spec, TYPE_NAMES.get(t.dtype, t.dtype), t.shape,
                                   t.is_contiguous(), t.device == self.group.device,
                                   t.device, role="output")
            return t
        if self._outputs is None:
            self._outputs = [None] * len(self.spec.outputs)
        if self._outputs[k] is None:
            self._outputs[k] = empty(o.shape, TORCH_TYPES[o.type], self.group.group)
        return self._outputs[k]

    def _fill(self, c, given, out, scalars_later=False):
        """Checks the arguments `given` (by name) and `out`, and fills call
        c's arrays with them; returns (by_name: input index -> value, the
        output tensors). With scalars_later, Scalars may be left out (bind)."""
        if out is not None:
            unknown = set(out) - {o.name for o in self.spec.outputs}
            if unknown:
                raise CocoError("'%s' has no output %s (its outputs: %s)"
                                % (self.variant, ", ".join("'%s'" % u for u in sorted(unknown)),
                                   ", ".join(o.name for o in self.spec.outputs)))
        by_name = {}
        for i, spec in enumerate(self.spec.inputs):
            if spec.name not in given:
                if scalars_later and spec.kind == "scalar":
                    continue
                raise CocoError("'%s' (rank %d) needs input '%s' (%s); given: %s"
                                % (self.variant, self.group.rank, spec.name,
                                   self.spec.expect(spec), ", ".join(sorted(given)) or "none"))
            self._set(c, i, spec, given[spec.name])
            by_name[i] = given[spec.name]
        extra = set(given) - {s.name for s in self.spec.inputs}
        if extra:
            raise CocoError("'%s' has no input %s (its inputs: %s)"
                            % (self.variant, ", ".join("'%s'" % e for e in sorted(extra)),
                               ", ".join(s.name for s in self.spec.inputs)))
        results = []
        for k, (o, a) in enumerate(zip(self.spec.outputs, c.alias)):
            if a >= 0:
                src = by_name[a]
                c.outputs[k] = (None if self.spec.inputs[a].kind == "scattered"
                                else src.data_ptr())
                results.append(src)
            else:
                t = self._output_tensor(k, o, out)
                c.outputs[k] = t.data_ptr()
                results.append(t)
        if self._window and self.group.nranks > 1 and not self._nccl_path:
            self._check_window(by_name, results)
        return by_name, results

    def _launch(self, c, seed, results):
        """Enqueues call c (its arrays filled) on the current stream; the
        result as __call__ returns it."""
        capturing = torch.cuda.is_current_stream_capturing()
        if capturing and not self._warm:
            raise CocoError(
                "'%s' cannot be captured in a CUDA graph yet: call it once with these sizes "
                "before capturing (its first call makes its workspace and bucket tables)"
                % self.variant)
        if seed is None:
            self._seed += 1
            seed = self._seed
        stream = torch.cuda.current_stream(self.group.device)
        outside = c(int(seed), stream.cuda_stream)
        self._warm = True
        if not capturing:
            self.group.watch.launched(self, stream)  # named by its repr if it stalls
        if outside and self.group.nranks > 1 and not self._warned:
            self._warned = True  # this object's calls skip warn_once's lock from now on
            _log.warn_once(
                ("outside the arena", self.so, self.variant),
                "coconet.torch: tensors given to '%s' lie outside the arena (%d at its first "
                "such call): a fused collective whose peers would read or write one of them "
                "takes its NCCL path, on every rank alike or the ranks hang (operands read "
                "only locally are fine; coconet.torch.empty makes tensors in the arena); said "
                "once a process" % (self.variant, outside), stacklevel=3)
        if len(results) == 1:
            return results[0]
        return {o.name: r for o, r in zip(self.spec.outputs, results)}

    def __call__(self, inputs: Optional[Mapping[str, Value]] = None, seed: Optional[int] = None,
                 out: Optional[Mapping[str, torch.Tensor]] = None, **named: Value) -> Result:
        """Runs the variant on this rank's tensors, given by name (a dict,
        or keywords). Returns the output's tensor, or a dict of them when
        there are several: the tensor given for it in `out` (a dict by
        output name), else the call's own in the arena, reused by every
        call; an output that is an Updated input's new value is that input's
        own tensor (its members, for a scattered one)."""
        given = dict(inputs or {}, **named)
        if _ops.traced(given.values()):  # torch.compile, export, fake or meta tensors
            return _ops.call(self, given, seed, out)
        _, results = self._fill(self._call, given, out)
        return self._launch(self._call, seed, results)

    def bind(self, inputs: Optional[Mapping[str, Value]] = None,
             out: Optional[Mapping[str, torch.Tensor]] = None, **named: Value) -> "Bound":
        """The variant with its tensors checked once (as a call checks them)
        and kept: a Bound, whose calls take only Scalars and check no tensor
        again, for a hot loop over the same tensors (an optimizer's step).
        A Scalar keeps the value last given (here or at a call); a call
        before every Scalar has one is refused. The tensors must keep their
        storage while bound: a call finds one moved and refuses it."""
        return Bound(self, dict(inputs or {}, **named), out)


class Bound:
    """A Compiled variant with its tensors bound (Compiled.bind): calling it
    with Scalars by name runs the variant on the bound tensors."""

    def __init__(self, compiled: Compiled, given: Mapping[str, Value],
                 out: Optional[Mapping[str, torch.Tensor]]) -> None:
        f = self.compiled = compiled
        self._given, self._out = dict(given), out  # for a traced call (coconet::call)
        self._call = S.Call(f.group.session, f.module, f.spec, *f._knobs)
        by_name, self._results = f._fill(self._call, given, out, scalars_later=True)
        self._scalars = {s.name: i for i, s in enumerate(f.spec.inputs) if s.kind == "scalar"}
        self._unset = {n for n, i in self._scalars.items() if i not in by_name}
        guard = []  # (tensor, its address, what it is): each call's guard
        for i, value in by_name.items():
            spec = f.spec.inputs[i]
            if spec.kind == "scattered":
                guard += [(t, t.data_ptr(), "input '%s' member %d" % (spec.name, k))
                          for k, t in enumerate(value)]
            elif spec.kind == "tensor":
                guard.append((value, value.data_ptr(), "input '%s'" % spec.name))
        for o, t in zip(f.spec.outputs, self._results):
            if isinstance(t, torch.Tensor):
                guard.append((t, t.data_ptr(), "output '%s'" % o.name))
        # kept as parallel lists: a call compares the addresses in one list
        # comparison (a hot step binds hundreds of members)
        self._guarded = [t for t, _, _ in guard]
        self._addresses = [a for _, a, _ in guard]
        self._what = [w for _, _, w in guard]

    def __repr__(self):
        return "<coconet.torch.Bound %r>" % self.compiled

    def __call__(self, seed: Optional[int] = None, **scalars: Union[float, int, torch.Tensor]
                 ) -> Result:
        f = self.compiled
        self._given.update(scalars)
        if torch.compiler.is_compiling():  # one coconet::call on the bound tensors
            return _ops.call(f, self._given, seed, self._out)
        for name, value in scalars.items():
            i = self._scalars.get(name)
            if i is None:
                raise CocoError("'%s' has no Scalar input '%s' (its Scalars: %s; tensors are "
                                "given to bind)" % (f.variant, name,
                                                    ", ".join(sorted(self._scalars)) or "none"))
            f._scalar(self._call, i, f.spec.inputs[i], value)
        self._unset -= scalars.keys()
        missing = self._unset
        if missing:
            raise CocoError("'%s' (rank %d) needs Scalar %s (not given to bind, nor here)"
                            % (f.variant, f.group.rank,
                               ", ".join("'%s'" % m for m in sorted(missing))))
        now = [t.data_ptr() for t in self._guarded]
        if now != self._addresses:
            k = next(k for k, (a, b) in enumerate(zip(now, self._addresses)) if a != b)
            raise CocoError("%s of '%s' (rank %d) moved since bind (its storage is now at "
                            "0x%x, not 0x%x): bind the tensors again"
                            % (self._what[k], f.variant, f.group.rank, now[k],
                               self._addresses[k]))
        return f._launch(self._call, seed, self._results)


def compile(path: Union[str, "os.PathLike[str]"], schedule: str = "program",
            sizes: Optional[Mapping[str, int]] = None, group: "Optional[ProcessGroup]" = None,
            seed: int = 0, nccl_path: bool = False) -> Compiled:
    """The program in `path` at `sizes` over the ranks of `group` (None: the
    default process group, or one rank without torch.distributed), under
    `schedule` ("program", a schedule's name, or "tuned": the tuning
    record's choice), built (or found in the cache) as `coconet run
    --backend cuda` builds it. Collective: every rank of the group calls it,
    in the same order as its other coconet.torch calls.

    A tensor that the variant's one-kernel collectives reach in the other
    ranks' memory must lie in the arena on every rank: a call given one
    outside it is refused, naming it (a rank that took the NCCL path while
    the others took the kernels would hang them). nccl_path=True accepts
    such tensors: the collective then takes its NCCL path, and every rank
    must pass its tensors alike."""
    return Compiled(path, schedule, sizes, group, seed, nccl_path=nccl_path)


from ._step import GradScaler, clip_grad_norm_  # noqa: E402 - they use the names above
