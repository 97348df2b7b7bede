"""_session.py: compiled variants called on device memory, through the GPU
runtime's session API (include/coconet_session.h, in
build/libcoconet_cuda.so) with ctypes, as _lib.py does for libcoconet.so:
the API is plain C with pointers as integers, so no C extension has to be
compiled against a given Python or PyTorch, and the same layer serves
coconet.torch and anything else holding device pointers (CuPy, raw CUDA).

Nothing here imports torch. What is here:
  build(program, schedule)  the variant's shared object, through the same
                            generator, toolchain and cache as `coconet run
                            --backend cuda` (coco_build_cuda; "tuned" takes
                            the tuning record's choice);
  VariantSpec               what one rank passes to a variant: each input's
                            kind (Scalar, tensor, scattered tensor), element
                            type, shape as this rank holds it, members; each
                            output's; the sizes; and the checks that name a
                            wrong argument, what was expected and what given;
  Runtime, Session, Call    the runtime library, one session (communicators
                            and the arena), and one variant's prepared call
                            (its argument arrays made once, pointers filled
                            in at each call)."""
import collections
import ctypes
import math
import os
import struct

from . import CocoError, _err_buf, _raise, _ERRLEN
from . import _log, _nccl_header
from ._lib import ON_BUILD, CocoCudaBuild, lib

TYPE_BYTES = {"FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8}
# coco_cuda_ctx.fused_algo by COCONET_FUSED's spelling: COCO_FUSED_ALGOS of
# include/coconet_cuda.h, in its order (tests/python/test_session.py checks)
FUSED = {"auto": 0, "oneshot": 1, "twoshot": 2, "nccl": 3, "push": 4}
MAXMEMBERS = 1 << 16

Built = collections.namedtuple("Built", "so variant knobs note")


def parse_knobs(text):
    """The knob setting of a tuned choice ("COCONET_FUSED=push",
    "COCONET_OVERLAP_CHUNKS=2", several separated by spaces, or "") as
    (fused_algo, overlap_chunks), -1 where the session's own applies."""
    fused, chunks = -1, -1
    for item in (text or "").split():
        name, _, value = item.partition("=")
        if name == "COCONET_FUSED" and value in FUSED:
            fused = FUSED[value]
        elif name == "COCONET_OVERLAP_CHUNKS" and value.isdigit() and 0 <= int(value) <= 64:
            chunks = int(value)
        else:
            raise CocoError("knob '%s': expected COCONET_FUSED=%s or COCONET_OVERLAP_CHUNKS=0..64"
                            % (item, "|".join(FUSED)))
    return fused, chunks


def package_home():
    """The coconet home `pip install` puts in the package (_home: the GPU
    runtime, its cuda.conf and the headers generated code includes), or
    None when the package was installed without it or runs from a checkout."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_home")
    return here if os.path.exists(os.path.join(here, "include", "coconet_cuda.h")) else None


def _checkout_home():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    return root if os.path.exists(os.path.join(root, "include", "coconet_cuda.h")) else None


def home():
    """The coconet home whose include/ and rt/kernels/ generated code
    includes: COCONET_HOME, else the package's own (package_home), else the
    checkout this package lies in; set in the environment, where the C
    library looks (coco_home)."""
    env = os.environ.get("COCONET_HOME")
    if env:
        return env
    root = package_home() or _checkout_home()
    if root is None:
        raise CocoError("coconet: the GPU path is not installed (the package was built "
                        "without nvcc or PyTorch's NCCL): run `python -m coconet.check`, "
                        "then reinstall with `pip install --no-build-isolation ./python`")
    os.environ["COCONET_HOME"] = root
    return root


def build(program, schedule="program", cuda_source=None, nccl_home=None, timeout_s=0):
    """Builds (or finds in the cache) the shared object of `program` (a
    coconet.Program, the program itself) and `schedule`; returns Built(so,
    variant, knobs, note): its path, the entry point's name, the knob setting
    a tuned choice needs and a note when the sizes were not tuned. A build
    that runs nvcc says so as it begins (_log.progress)."""
    home()
    bufs = [ctypes.create_string_buffer(n) for n in (4096, 256, 256, 2048)]
    on_build = ON_BUILD(_say_building)  # alive until the call returns
    b = CocoCudaBuild(schedule.encode() if schedule else None,
                      str(cuda_source).encode() if cuda_source else None, float(timeout_s),
                      str(nccl_home).encode() if nccl_home else None,
                      *[ctypes.addressof(x) for x in bufs], *[len(x) for x in bufs],
                      ctypes.cast(on_build, ctypes.c_void_p), None)
    err = _err_buf()
    if lib.coco_build_cuda(program._h, ctypes.byref(b), err, _ERRLEN):
        _raise(err, "%s: the CUDA code could not be built" % program.name)
    return Built(*[x.value.decode() for x in bufs])


def _say_building(so, arg):
    """coco_cuda_build's on_build: nvcc is about to build `so` (bytes)."""
    _log.progress("building %s with nvcc (once for this source; minutes for a large "
                  "program)" % so.decode(errors="replace"))


# ---- what one rank passes ----

# constant: a Scalar declared with a value holds it (the generated code does),
# else None
InputSpec = collections.namedtuple("InputSpec", "name kind type shape members constant",
                                   defaults=(None,))
OutputSpec = collections.namedtuple("OutputSpec", "name type shape")

_BF16_MAX = (2 - 2 ** -7) * 2.0 ** 127


def round_scalar(value, type_name):
    """value as a Scalar of type_name holds it (rounded once, to nearest,
    ties to even), as the CPU reference and the command line give it to the
    generated code: a Python float handed on unrounded would meet the
    program's rounded copies of it (Adam's 1 - beta2 against its
    Pow(beta2, t)) and the results would drift from the CPU's."""
    v = float(value)
    if math.isnan(v) or math.isinf(v) or type_name not in ("FP32", "FP16", "BF16"):
        return v
    if type_name == "BF16":
        return _round_bf16(v)
    fmt = "<e" if type_name == "FP16" else "<f"
    try:
        return struct.unpack(fmt, struct.pack(fmt, v))[0]
    except OverflowError:  # beyond the type's largest value
        return math.copysign(math.inf, v)


def _round_bf16(v):
    """v to BF16 (8 significant bits, exponents down to -126, subnormals
    to 2^-133), from the double directly"""
    _, e = math.frexp(v)
    step = max(e - 8, -133)  # the exponent of the last kept bit
    r = math.ldexp(round(math.ldexp(v, -step)), step)
    return math.copysign(math.inf, v) if abs(r) > _BF16_MAX else r


def _shape_text(shape):
    return "[%s]" % ", ".join(str(d) for d in shape)


class VariantSpec:
    """The arguments of `variant` ("program" or a schedule's name) of the
    coconet.Program `base` on `rank`: inputs in Execute order, outputs (named
    as the program names them), the program's sizes."""

    def __init__(self, base, variant, rank):
        prog = base if variant == "program" else base.schedule(variant)
        self.variant, self.rank, self.nranks = variant, rank, base.ranks
        self.sizes = [lib.coco_size_value(base._h, i) for i in range(lib.coco_num_sizes(base._h))]
        self.group_size = lib.coco_program_group_size(base._h)
        self.inputs = [self._input(prog, i, rank) for i in range(lib.coco_num_inputs(prog._h))]
        names = base.outputs
        self.outputs = []
        for i, name in enumerate(prog.outputs):
            info = prog.tensor_info(name, rank)
            self.outputs.append(OutputSpec(names[i] if i < len(names) else name, info.type,
                                           info.local_shape))
        self._prog = prog  # keeps the scheduled program alive

    @staticmethod
    def _input(prog, i, rank):
        name = lib.coco_input_name(prog._h, i).decode()
        if lib.coco_input_is_scalar(prog._h, i):
            value = ctypes.c_double()
            constant = value.value if lib.coco_input_constant(prog._h, i, ctypes.byref(value)) \
                else None
            return InputSpec(name, "scalar", prog.tensor_info(name, rank).type, (), (), constant)
        info = prog.tensor_info(name, rank)
        counts = (ctypes.c_long * MAXMEMBERS)()
        n = lib.coco_input_members(prog._h, i, counts, MAXMEMBERS)
        if n > MAXMEMBERS:
            raise CocoError("input '%s' has %d members: at most %d" % (name, n, MAXMEMBERS))
        if n > 0:
            return InputSpec(name, "scattered", info.type, info.local_shape, tuple(counts[:n]))
        return InputSpec(name, "tensor", info.type, info.local_shape, ())

    def input(self, name):
        for s in self.inputs:
            if s.name == name:
                return s
        raise CocoError("'%s' is not an input of '%s' (its inputs: %s)"
                        % (name, self.variant, ", ".join(s.name for s in self.inputs)))

    def expect(self, spec):
        """What an argument must be, in words."""
        if spec.kind == "scalar":
            return "a number (Scalar)"
        if spec.kind == "scattered":
            return ("a list of %d %s tensors of %s elements (scattered), each contiguous"
                    % (len(spec.members), spec.type, ", ".join(str(m) for m in spec.members)))
        return "%s %s, contiguous" % (spec.type, _shape_text(spec.shape))

    def check_tensor(self, spec, type_name, shape, contiguous, on_device, device_text,
                     member=None, role="input"):
        """Raises CocoError naming the argument (and member), what was
        expected and what was given, when a tensor does not match: its
        element type, its shape (a member: its element count), contiguity,
        and whether it lies on this session's GPU (device_text: where)."""
        if member is None:
            want_shape, got_shape = tuple(spec.shape), tuple(shape)
        else:
            count = 1
            for d in shape:
                count *= d
            want_shape, got_shape = (spec.members[member],), (count,)
        problems = []
        if type_name != spec.type:
            problems.append("element type %s" % type_name)
        if want_shape != got_shape:
            problems.append("shape %s" % _shape_text(shape) if member is None else
                            "%d elements (shape %s)" % (got_shape[0], _shape_text(shape)))
        if not contiguous:
            problems.append("not contiguous")
        if not on_device:
            problems.append("on %s" % device_text)
        if problems:
            what = "%s '%s'%s" % (role, spec.name, "" if member is None else " member %d" % member)
            want = ("%s %s, contiguous, on this rank's GPU" % (spec.type, _shape_text(want_shape))
                    if member is None else "%s with %d elements, contiguous, on this rank's GPU"
                    % (spec.type, want_shape[0]))
            raise CocoError("%s of '%s' (rank %d): expected %s; given %s"
                            % (what, self.variant, self.rank, want, ", ".join(problems)))

    def check_members(self, spec, n):
        if n != len(spec.members):
            raise CocoError("input '%s' of '%s' (rank %d): expected %s; given %d tensors"
                            % (spec.name, self.variant, self.rank, self.expect(spec), n))

    def output_bytes(self, i):
        n = TYPE_BYTES[self.outputs[i].type]
        for d in self.outputs[i].shape:
            n *= d
        return n

    def input_bytes(self, i):
        s = self.inputs[i]
        if s.kind == "scalar":
            return 0
        n = TYPE_BYTES[s.type]
        for d in s.shape:
            n *= d
        return n


# ---- the arguments the peer-memory kernels reach ----

def window_args(so, variant):
    """(inputs, outputs): the index sets of the arguments whose tensors (or
    members) the variant's one-kernel collectives reach in the other ranks'
    windows (the generated coco_window_inputs__V and coco_window_outputs__V,
    include/coconet_cuda.h), or None for an object without them."""
    try:
        lib = ctypes.CDLL(so)
    except OSError:
        return None
    sets = []
    for what in ("inputs", "outputs"):
        try:
            arr = (ctypes.c_int * 65536).in_dll(lib, "coco_window_%s__%s" % (what, variant))
        except ValueError:
            return None
        ids = []
        for x in arr:  # up to its -1
            if x < 0:
                break
            ids.append(x)
        sets.append(frozenset(ids))
    return tuple(sets)


# ---- which NCCL ----

def _runtime_conf(runtime_path):
    conf = {}
    try:
        with open(os.path.join(os.path.dirname(runtime_path), "cuda.conf")) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                conf[k] = v
    except OSError:
        pass
    return conf


def _v(code):
    return "%d.%d.%d" % (code // 10000, code // 100 % 100, code % 100)


def nccl_setup(runtime_path, loaded):
    """The NCCL prefix to build generated code against (None: the runtime's
    own, build/cuda.conf), checked against the library this process's NCCL
    calls bind to (loaded: (path, version code), Runtime.nccl()). Raises
    CocoError saying what to do when no headers match it.

    The runtime `pip install` builds links PyTorch's own libnccl.so.2 (its
    wheel's), so the calls of both bind to the one library and the versions
    agree. Not /proc/self/maps: PyTorch opens its wheel's libnccl.so.2 by
    its path even when another was loaded first (LD_PRELOAD), so both are
    mapped, and the calls bind to the first."""
    conf = _runtime_conf(runtime_path)
    built = _nccl_header.version(conf.get("NCCL_INCLUDE", ""))
    if loaded is None or built == loaded[1]:
        return None
    path, version = loaded
    prefix = os.path.dirname(os.path.dirname(path))
    inc = os.path.join(prefix, "include")
    if _nccl_header.version(inc) == version and os.path.exists(os.path.join(inc, "nccl_device.h")):
        return prefix
    raise CocoError(
        "coconet: this process loaded NCCL %s (%s), but the coconet runtime %s was built "
        "with NCCL %s headers (%s), and no NCCL %s headers with the device API lie next to "
        "the loaded library; NCCL's device API has no ABI promise across versions, so "
        "build coconet against the NCCL this process loads: reinstall it in this "
        "environment (`pip install --no-build-isolation --force-reinstall ./python` builds "
        "against PyTorch's NCCL), or from a checkout run `make NCCL_HOME=PREFIX` with "
        "PREFIX/include holding NCCL %s's headers"
        % (_v(version), path, runtime_path, _v(built) if built else "unknown",
           conf.get("NCCL_INCLUDE", "no cuda.conf beside it"), _v(version), _v(version)))


# ---- the runtime ----

class SessionConfig(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int), ("nranks", ctypes.c_int), ("device", ctypes.c_int),
                ("group_size", ctypes.c_int), ("nccl_id", ctypes.c_char_p),
                ("arena_bytes", ctypes.c_size_t), ("timeout_s", ctypes.c_double),
                ("world", ctypes.c_void_p)]


class CallArgs(ctypes.Structure):
    VP = ctypes.POINTER(ctypes.c_void_p)
    _fields_ = [("module", ctypes.c_int), ("variant", ctypes.c_char_p),
                ("input", VP), ("scalar", ctypes.POINTER(ctypes.c_double)), ("output", VP),
                ("members", ctypes.POINTER(VP)), ("ninputs", ctypes.c_int),
                ("noutputs", ctypes.c_int), ("input_bytes", ctypes.POINTER(ctypes.c_size_t)),
                ("output_bytes", ctypes.POINTER(ctypes.c_size_t)),
                ("nmembers", ctypes.POINTER(ctypes.c_int)),
                ("member_bytes", ctypes.POINTER(ctypes.POINTER(ctypes.c_size_t))),
                ("size", ctypes.POINTER(ctypes.c_long)), ("nsize", ctypes.c_int),
                ("seed", ctypes.c_ulonglong), ("stream", ctypes.c_void_p),
                ("fused_algo", ctypes.c_int), ("overlap_chunks", ctypes.c_int),
                ("group_size", ctypes.c_int), ("outside", ctypes.c_int)]


SESSION_ABI = 3
ID_BYTES = 128


def runtime_path():
    """COCONET_CUDA_RUNTIME, else build/libcoconet_cuda.so of the coconet
    home (home(): COCONET_HOME, the package's, the checkout's)."""
    env = os.environ.get("COCONET_CUDA_RUNTIME")
    if env:
        return env
    try:
        path = os.path.join(home(), "build", "libcoconet_cuda.so")
    except CocoError as e:
        raise CocoError("coconet: libcoconet_cuda.so not found: %s" % e)
    if not os.path.exists(path):
        raise CocoError("coconet: %s not found: run `make` in the checkout on a machine with "
                        "nvcc and NCCL, reinstall with `pip install --no-build-isolation "
                        "./python`, or set COCONET_CUDA_RUNTIME" % path)
    return path


class Runtime:
    """The GPU runtime library, its session functions declared."""

    def __init__(self, path=None):
        self.path = path or runtime_path()
        try:
            self.lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise CocoError("coconet: cannot load the runtime %s: %s" % (self.path, e))
        P, I, S, N, E = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p
        table = {
            "coco_session_abi": (I, []),
            "coco_session_nccl": (I, [ctypes.c_char_p, N]),
            "coco_session_unique_id": (I, [ctypes.c_char_p, E, N]),
            "coco_session_open": (P, [ctypes.POINTER(SessionConfig), E, N]),
            "coco_session_load": (I, [P, S, E, N]),
            "coco_session_output_alias": (I, [P, I, I]),
            "coco_session_alloc": (P, [P, N, E, N]),
            "coco_session_arena": (None, [P, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(N), ctypes.POINTER(N)]),
            "coco_session_call": (I, [P, ctypes.POINTER(CallArgs), E, N]),
            "coco_session_wait": (I, [P, P, E, N]),
            "coco_session_describe": (None, [P, ctypes.c_char_p, N]),
            "coco_session_close": (None, [P, I]),
        }
        for name, (res, args) in table.items():
            try:
                f = getattr(self.lib, name)
            except AttributeError:
                raise CocoError("coconet: the runtime %s has no %s: rebuild it (make)"
                                % (self.path, name))
            f.restype, f.argtypes = res, args
        abi = self.lib.coco_session_abi()
        if abi != SESSION_ABI:
            raise CocoError("coconet: the runtime %s has session ABI %d, this package %d: "
                            "rebuild it (make)" % (self.path, abi, SESSION_ABI))

    def nccl(self):
        """(path, version code) of the libnccl this process's NCCL calls
        bind to, or None when there is none to call."""
        buf = ctypes.create_string_buffer(4096)
        version = self.lib.coco_session_nccl(buf, len(buf))
        return (buf.value.decode(errors="replace"), version) if version > 0 else None

    def unique_id(self):
        buf, err = ctypes.create_string_buffer(ID_BYTES), _err_buf()
        if self.lib.coco_session_unique_id(buf, err, _ERRLEN):
            _raise(err, "ncclGetUniqueId failed")
        return buf.raw[:ID_BYTES]


class Session:
    """One session: communicators over `nranks` ranks, cuBLASLt, the arena.
    Every rank opens it, loads the same objects and allocates the same
    buffers in the same order (include/coconet_session.h). world: the
    address of an ncclComm_t of the caller's to adopt as WORLD (made by the
    library Runtime.nccl() names; the session never destroys it), else 0:
    WORLD is opened from nccl_id."""

    def __init__(self, runtime, rank, nranks, device, nccl_id, group_size=0, arena_bytes=0,
                 timeout_s=0, world=0):
        if len(nccl_id) != ID_BYTES:
            raise CocoError("the NCCL unique id has %d bytes, not %d" % (len(nccl_id), ID_BYTES))
        self.rt, self.rank, self.nranks, self.device = runtime, rank, nranks, device
        self._id = ctypes.create_string_buffer(bytes(nccl_id), ID_BYTES)
        cfg = SessionConfig(rank, nranks, device, group_size,
                            ctypes.cast(self._id, ctypes.c_char_p), int(arena_bytes),
                            float(timeout_s), int(world) or None)
        self.world_adopted = bool(world)
        err = _err_buf()
        self._h = runtime.lib.coco_session_open(ctypes.byref(cfg), err, _ERRLEN)
        if not self._h:
            _raise(err, "rank %d: the session could not be opened" % rank)
        self._err = _err_buf()
        self._span = None  # (base, end) of the arena, asked once (in_arena)

    def load(self, so):
        m = self.rt.lib.coco_session_load(self._h, str(so).encode(), self._err, _ERRLEN)
        if m < 0:
            _raise(self._err, "%s could not be loaded" % so)
        return m

    def output_alias(self, module, i):
        return self.rt.lib.coco_session_output_alias(self._h, module, i)

    def alloc(self, nbytes):
        """A buffer of the arena (its address); collective: every rank the same."""
        p = self.rt.lib.coco_session_alloc(self._h, int(nbytes), self._err, _ERRLEN)
        if not p:
            _raise(self._err, "the arena could not give %d bytes" % nbytes)
        return p

    def arena(self):
        base, size, used = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
        self.rt.lib.coco_session_arena(self._h, ctypes.byref(base), ctypes.byref(size),
                                       ctypes.byref(used))
        return base.value or 0, size.value, used.value

    def in_arena(self, ptr, nbytes):
        if self._span is None:  # the arena's place is fixed once the session is open
            base, size, _ = self.arena()
            self._span = (base, base + size)
        base, end = self._span
        return base <= ptr and ptr + nbytes <= end

    def wait(self, stream=None):
        if self.rt.lib.coco_session_wait(self._h, stream, self._err, _ERRLEN):
            _raise(self._err, "waiting for the GPU failed")

    def describe(self):
        buf = ctypes.create_string_buffer(1024)
        self.rt.lib.coco_session_describe(self._h, buf, len(buf))
        return buf.value.decode()

    def close(self, abort=False):
        if self._h:
            self.rt.lib.coco_session_close(self._h, 1 if abort else 0)
            self._h = None


class Call:
    """One variant's call on a session: the argument arrays made once; each
    call fills in the pointers, the Scalars, the seed and the stream."""

    def __init__(self, session, module, spec, fused_algo=-1, overlap_chunks=-1):
        self.session, self.spec = session, spec
        nin, nout = len(spec.inputs), len(spec.outputs)
        VP = ctypes.c_void_p
        self.inputs = (VP * max(nin, 1))()
        self.scalars = (ctypes.c_double * max(nin, 1))()
        self.outputs = (VP * max(nout, 1))()
        self.member_arrays = [(VP * len(s.members))() if s.kind == "scattered" else None
                              for s in spec.inputs]
        self.members = (ctypes.POINTER(VP) * max(nin, 1))(
            *[ctypes.cast(a, ctypes.POINTER(VP)) if a is not None else None
              for a in self.member_arrays])
        self.in_bytes = (ctypes.c_size_t * max(nin, 1))(
            *[spec.input_bytes(i) for i in range(nin)])
        self.out_bytes = (ctypes.c_size_t * max(nout, 1))(
            *[spec.output_bytes(i) for i in range(nout)])
        self.nmembers = (ctypes.c_int * max(nin, 1))(*[len(s.members) for s in spec.inputs])
        self.mbytes_arrays = [(ctypes.c_size_t * len(s.members))(
            *[m * TYPE_BYTES[s.type] for m in s.members]) if s.members else None
            for s in spec.inputs]
        self.mbytes = (ctypes.POINTER(ctypes.c_size_t) * max(nin, 1))(
            *[ctypes.cast(a, ctypes.POINTER(ctypes.c_size_t)) if a is not None else None
              for a in self.mbytes_arrays])
        self.sizes = (ctypes.c_long * max(len(spec.sizes), 1))(*spec.sizes)
        self.variant = spec.variant.encode()
        self.args = CallArgs(module, self.variant, self.inputs, self.scalars, self.outputs,
                             self.members, nin, nout, self.in_bytes, self.out_bytes,
                             self.nmembers, self.mbytes, self.sizes, len(spec.sizes), 0, None,
                             fused_algo, overlap_chunks, spec.group_size, 0)
        self.alias = [session.output_alias(module, i) for i in range(nout)]
        self._err = _err_buf()
        self._call = session.rt.lib.coco_session_call

    def __call__(self, seed, stream):
        """Runs with the pointers set in self.inputs / member_arrays /
        scalars / outputs; returns how many buffers lay outside the arena."""
        self.args.seed = seed
        self.args.stream = stream
        if self._call(self.session._h, ctypes.byref(self.args), self._err, _ERRLEN):
            _raise(self._err, "%s failed" % self.spec.variant)
        return self.args.outside
