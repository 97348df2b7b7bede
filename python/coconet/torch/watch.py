"""coconet.torch.watch: a stalled coconet call raises instead of hanging.

Each session has a Watchdog. After a call's launch (not during CUDA-graph
capture), at most once an interval, the call records a CUDA event on its
stream (one clock read per call otherwise). A thread polls the events in
order, in the relaxed capture mode, so that its queries never break a
CUDA-graph capture. When one has not completed `timeout_s` after it was
recorded (a peer rank died inside a collective, or a kernel stalls), the
watchdog logs why, naming the rank and the call, and raises Stalled in the
thread that made the calls at its next Python instruction: a loop waiting
on the GPU from Python, or coconet.torch.synchronize (a bounded wait in the
runtime), then ends with the exception rather than spinning. A thread
blocked inside a CUDA call of its own (torch.cuda.synchronize) sees it when
that call returns. The timeout is COCONET_TIMEOUT (seconds, default 300),
the session's host-wait limit too."""
import collections
import ctypes
import logging
import threading
import time
from typing import Any, Callable, Deque, Optional, Tuple

from .. import CocoError

log = logging.getLogger("coconet.torch")


class Stalled(CocoError):
    """GPU work up to a coconet call did not complete within the timeout."""


def _relaxed_capture_mode():
    """This thread's CUDA stream-capture mode relaxed (the driver's
    per-thread setting), so that its event queries never invalidate a CUDA
    graph the calling thread captures in torch's default (global) mode."""
    try:
        mode = ctypes.c_int(2)  # CU_STREAM_CAPTURE_MODE_RELAXED
        ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
    except (OSError, AttributeError):
        pass


def _cuda_event(stream: Any) -> Any:
    import torch
    e = torch.cuda.Event()
    e.record(stream)
    return e


class Watchdog:
    """Watches the calls of one rank's session (see the module's
    documentation); make_event(stream) -> an object with query() (a CUDA
    event by default)."""

    def __init__(self, rank: int, timeout_s: float, interval_s: Optional[float] = None,
                 make_event: Callable[[Any], Any] = _cuda_event) -> None:
        self.rank, self.timeout_s = rank, float(timeout_s)
        self.interval_s = interval_s or min(1.0, self.timeout_s / 4)
        self.fired = None  # the message, once fired
        self._make_event = make_event
        self._pending: Deque[Tuple[Any, float, Any]] = collections.deque()  # (event, when recorded, the call)
        self._lock = threading.Lock()
        self._next = 0.0
        self._caller = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coconet-watchdog", daemon=True)
        self._thread.start()

    def launched(self, what: Any, stream: Any) -> None:
        """A call (named `what`) was launched on `stream`."""
        now = time.monotonic()
        if now < self._next or self.fired:
            return
        self._next = now + self.interval_s
        self._caller = threading.get_ident()
        event = self._make_event(stream)
        with self._lock:
            self._pending.append((event, now, what))

    def check(self, now: float) -> Optional[str]:
        """The message when the oldest pending event is overdue, else None."""
        with self._lock:
            while self._pending and self._pending[0][0].query():
                self._pending.popleft()
            if not self._pending:
                return None
            _, when, what = self._pending[0]
        if now - when <= self.timeout_s:
            return None
        return ("coconet.torch: rank %d: the GPU work up to its call of %s has not completed "
                "%.0f s after the call (COCONET_TIMEOUT=%g s): a peer rank died or hangs, or a "
                "kernel stalls" % (self.rank, what, now - when, self.timeout_s))

    def _run(self):
        if self._make_event is _cuda_event:
            _relaxed_capture_mode()
        while not self._stop.wait(self.interval_s):
            why = self.check(time.monotonic())
            if why:
                self._fire(why)
                return

    def _fire(self, why):
        self.fired = why
        log.error(why)
        exc = type("Stalled", (Stalled,), {"__init__": lambda self: Stalled.__init__(self, why)})
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._caller),
                                                   ctypes.py_object(exc))

    def stop(self) -> None:
        self._stop.set()
