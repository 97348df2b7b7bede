"""coconet: load, schedule and run coconet programs from Python.

    import coconet
    prog = coconet.load("examples/adam.coco", sizes={"N": 1024}, ranks=4)
    prog.schedules            # the schedules written in the file
    outputs = prog.run_cpu({"lr": 0.01, "t": 1.0})

run_cpu runs a program (or one of its schedules) on the CPU reference
executor with simulated ranks, on NumPy arrays: a tensor Replicated over
WORLD is one array, one Replicated over GROUP a list of one array per group
(group g: ranks g*G to g*G+G-1), a Sliced or Local tensor a list of one array
per rank (each of the shape that rank holds), a Scalar a number. Inputs not given keep the seeded
data `coconet run` draws. Errors from the C library are raised as
CocoError, with the file, line, column and message."""
import collections
import ctypes
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ._lib import CocoConfig, CocoTensor, lib

__all__ = ["CocoError", "Program", "TensorInfo", "load"]

_ERRLEN = 8192
_DTYPES = {"FP16": np.float16, "BF16": np.float32, "FP32": np.float32, "FP64": np.float64}


TensorInfo = collections.namedtuple("TensorInfo",
                                    "name type layout global_shape local_shape group_ranks")


class CocoError(Exception):
    """A program, schedule or input coconet refused: file, line and column
    (None when the message has no position) and the message."""

    def __init__(self, text: str) -> None:
        text = text.strip()
        m = re.match(r"^(.*?):(\d+):(\d+): error: (.*)$", text.split("\n")[0])
        self.file: Optional[str] = None
        self.line: Optional[int] = None
        self.column: Optional[int] = None
        if m:
            self.file, self.line, self.column = m.group(1), int(m.group(2)), int(m.group(3))
            self.message = m.group(4)
        else:
            self.message = text.split("\n")[0]
        self.text = text
        super().__init__(text)


def _err_buf():
    return ctypes.create_string_buffer(_ERRLEN)


def _raise(buf, fallback):
    raise CocoError(buf.value.decode(errors="replace") or fallback)


def _define(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("sizes[%r]: expected a number, got %r" % (name, value))
    return ("%s=%s" % (name, repr(value) if isinstance(value, float) else value)).encode()


def load(path: Union[str, "os.PathLike[str]"], sizes: Optional[Mapping[str, Union[int, float]]] = None,
         ranks: int = 4, group_size: int = 0) -> "Program":
    """Parses, binds and checks the program in `path`: sizes and scalars by
    name (as `-D NAME=VALUE`), `ranks` simulated ranks, GROUP's size (0: as
    the file says). Raises CocoError when the program is refused."""
    defines = [_define(k, v) for k, v in (sizes or {}).items()]
    arr = (ctypes.c_char_p * max(len(defines), 1))(*defines)
    cfg = CocoConfig(arr, len(defines), int(ranks), int(group_size))
    err = _err_buf()
    handle = lib.coco_load_file(str(path).encode(), ctypes.byref(cfg), err, _ERRLEN)
    if not handle:
        _raise(err, "%s: could not be loaded" % path)
    return Program(handle, None)


class Program:
    """A checked program, or the program under one of its schedules."""

    def __init__(self, handle: Any, parent: Optional["Program"]) -> None:
        self._h = handle
        self._parent = parent  # a scheduled program keeps its program alive

    def __del__(self):
        if getattr(self, "_h", None):
            lib.coco_program_free(self._h)
            self._h = None

    @property
    def name(self) -> str:
        return lib.coco_program_name(self._h).decode()

    @property
    def ranks(self) -> int:
        return lib.coco_num_ranks(self._h)

    @property
    def inputs(self) -> List[str]:
        return [lib.coco_input_name(self._h, i).decode() for i in range(lib.coco_num_inputs(self._h))]

    @property
    def outputs(self) -> List[str]:
        return [lib.coco_output_name(self._h, i).decode()
                for i in range(lib.coco_num_outputs(self._h))]

    @property
    def schedules(self) -> List[str]:
        """The names of the schedules: written in the file, added, enumerated."""
        return [lib.coco_schedule_name(self._h, i).decode()
                for i in range(lib.coco_num_schedules(self._h))]

    def schedule_notes(self) -> Dict[str, Optional[str]]:
        """Schedule name -> its name in the paper's notation (None: written by hand)."""
        out = {}
        for i in range(lib.coco_num_schedules(self._h)):
            note = lib.coco_schedule_note(self._h, i)
            out[lib.coco_schedule_name(self._h, i).decode()] = note.decode() if note else None
        return out

    def add_schedules(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Adds the Schedule blocks of a file."""
        err = _err_buf()
        if lib.coco_add_schedules(self._h, str(path).encode(), err, _ERRLEN):
            _raise(err, "%s: schedules could not be added" % path)

    def enumerate_schedules(self) -> List[str]:
        """Adds every distinct valid schedule; returns their names."""
        lib.coco_enumerate_schedules(self._h)
        return self.schedules

    def schedule(self, name: str) -> "Program":
        """The program under schedule `name`, a new Program."""
        err = _err_buf()
        handle = lib.coco_schedule(self._h, name.encode(), err, _ERRLEN)
        if not handle:
            _raise(err, "no schedule '%s'" % name)
        return Program(handle, self)

    @property
    def _output_names(self):
        """A schedule's outputs go by its program's names (by position)."""
        return self._parent.outputs if self._parent else self.outputs

    def run_cpu(self, inputs: Optional[Mapping[str, Any]] = None, seed: int = 1, threads: int = 0,
                with_inputs: bool = False
                ) -> Union[Dict[str, Any], Tuple[Dict[str, Any], Dict[str, Any]]]:
        """Runs on the CPU reference executor. Returns {output: value} (a
        schedule's outputs named as its program's); with with_inputs, also
        {input: value after the run} (Updated tensors' new values). See the
        module's documentation for the layouts. BF16 values come back as
        float32 arrays (NumPy has no BF16), holding BF16 values exactly."""
        err = _err_buf()
        if lib.coco_run_fits(self._h, err, _ERRLEN):
            _raise(err, "the run does not fit in memory")
        run = lib.coco_run_new(self._h, int(seed), int(threads))
        if not run:
            raise CocoError("%s: the run could not be set up" % self.name)
        try:
            known = self.inputs
            for name, value in (inputs or {}).items():
                if name not in known:
                    raise CocoError("'%s' is not an input of program '%s' (its inputs: %s)"
                                    % (name, self.name, ", ".join(known)))
                self._write(run, name, value)
            if lib.coco_run_execute(run, err, _ERRLEN):
                _raise(err, "the run failed")
            outputs = {shown: self._read(run, name)
                       for shown, name in zip(self._output_names, self.outputs)}
            if with_inputs:
                return outputs, {name: self._read(run, name, lib.coco_run_updated)
                                 for name in known}
            return outputs
        finally:
            lib.coco_run_free(run)

    def tensor_info(self, name: str, rank: int = 0) -> TensorInfo:
        """A named value's element type, layout and shapes (global, and as
        `rank` holds it)."""
        t = CocoTensor()
        if lib.coco_describe(self._h, name.encode(), int(rank), ctypes.byref(t)):
            raise CocoError("'%s' is not a value of program '%s' on rank %d"
                            % (name, self.name, rank))
        return TensorInfo(name, t.type.decode(), t.layout.decode(),
                          tuple(t.global_shape[i] for i in range(t.ndim)),
                          tuple(t.local_shape[i] for i in range(t.ndim)), t.group_ranks)

    # ---- values of one run ----

    def _tensor(self, run, name, rank):
        t = CocoTensor()
        if lib.coco_run_tensor(run, name.encode(), rank, ctypes.byref(t)):
            raise CocoError("'%s' has no value on rank %d" % (name, rank))
        return t

    def _parts(self, layout, group_ranks):
        """How a value is given and returned: (what one array is, [the ranks
        each array is on]): one array for all ranks, one per group, or one
        per rank."""
        if layout.startswith("Sliced") or layout == "Local":
            return "rank", [[r] for r in range(self.ranks)]
        if group_ranks >= self.ranks:
            return None, [list(range(self.ranks))]
        return "group", [list(range(k, k + group_ranks))
                         for k in range(0, self.ranks, group_ranks)]

    def _write(self, run, name, value):
        info = self.tensor_info(name)
        each, parts = self._parts(info.layout, info.group_ranks)
        if each is None:
            value = [value]
        elif not isinstance(value, (list, tuple)) or len(value) != len(parts):
            raise CocoError("input '%s' is %s: expected a list of %d arrays, one per %s"
                            % (name, info.layout, len(parts), each))
        for ranks, part in zip(parts, value):
            for rank in ranks:
                self._write_rank(run, name, rank, part)

    def _write_rank(self, run, name, rank, value):
        t = self._tensor(run, name, rank)
        shape = tuple(t.local_shape[i] for i in range(t.ndim))
        a = np.asarray(value, dtype=np.float64)
        if a.shape != shape and not (a.size == 1 and t.count == 1):
            raise CocoError("input '%s' on rank %d: expected shape %s (%s %s), got %s"
                            % (name, rank, list(shape), t.type.decode(), t.layout.decode(),
                               list(a.shape)))
        a = np.ascontiguousarray(a.reshape(-1))
        err = _err_buf()
        if lib.coco_run_write(run, name.encode(), rank,
                              a.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), a.size,
                              err, _ERRLEN):
            _raise(err, "input '%s' could not be written" % name)

    @staticmethod
    def _array(t):
        shape = tuple(t.local_shape[i] for i in range(t.ndim))
        a = np.ctypeslib.as_array(t.data, shape=(t.count,)) if t.count else np.zeros(0)
        return a.astype(_DTYPES[t.type.decode()]).reshape(shape)

    def _read(self, run, name, getter=None):
        """A value after the run, through getter (lib.coco_run_tensor, or
        lib.coco_run_updated for an input's new value)."""
        getter = getter or lib.coco_run_tensor

        def at(rank):
            t = CocoTensor()
            if getter(run, name.encode(), rank, ctypes.byref(t)):
                raise CocoError("'%s' has no value on rank %d" % (name, rank))
            return t

        first = at(0)
        each, parts = self._parts(first.layout.decode(), first.group_ranks)
        values = [self._array(at(ranks[0])) for ranks in parts]
        return values[0] if each is None else values
