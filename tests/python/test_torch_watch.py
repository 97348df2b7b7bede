"""test_torch_watch.py: coconet.torch.watch's Watchdog with stand-in
events: a call whose work never completes makes the calling thread raise
Stalled naming the rank and the call within the timeout, while it waits
in a Python loop; completed work never fires it. Skipped without torch."""
import time

import pytest

pytest.importorskip("torch")
from coconet.torch.watch import Stalled, Watchdog  # noqa: E402


class Event:
    def __init__(self, done):
        self.done = done

    def query(self):
        return self.done


def wait_loop(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_stalled_call_raises():
    w = Watchdog(3, timeout_s=0.3, interval_s=0.05, make_event=lambda stream: Event(False))
    start = time.monotonic()
    with pytest.raises(Stalled, match=r"rank 3: the GPU work up to its call of 'paper' has not "
                                      r"completed .* \(COCONET_TIMEOUT=0.3 s\)"):
        w.launched("'paper'", None)
        wait_loop(5)
    assert time.monotonic() - start < 2
    assert "rank 3" in w.fired


def test_completed_calls_do_not_fire():
    w = Watchdog(0, timeout_s=0.2, interval_s=0.05, make_event=lambda stream: Event(True))
    for _ in range(5):
        w.launched("'program'", None)
        wait_loop(0.1)
    wait_loop(0.4)
    w.stop()
    assert w.fired is None
