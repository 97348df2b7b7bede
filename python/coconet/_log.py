"""coconet._log: what the package says at run time, each once per process.

  progress(text)      INFO on the "coconet" logger (logging): a build of
                      generated code with nvcc, which takes minutes. Where
                      the application has configured no logging handler,
                      the line goes to stderr instead, so that a user
                      waiting on nvcc still sees why; with logging
                      configured, its level and handlers decide.
  warn_once(key, text)
                      a UserWarning through `warnings`, the first time a
                      condition (key) is met in this process only: a
                      condition met at every call, or by every variant at
                      every size, warns once, not at each call.

Under torchrun every rank is a process of its own: a condition every rank
meets is said by each of them once."""
import logging
import sys
import threading
import warnings
from typing import Hashable, Set

log = logging.getLogger("coconet")

_warned: Set[Hashable] = set()
_lock = threading.Lock()


def progress(text: str) -> None:
    """text as INFO on the coconet logger, or on stderr where logging has
    no handler (see the module's documentation)."""
    if log.hasHandlers():
        log.info(text)
    else:
        print("coconet: " + text, file=sys.stderr, flush=True)


def warn_once(key: Hashable, text: str, stacklevel: int = 2) -> bool:
    """Warns text (a UserWarning) unless key has warned in this process;
    True when it warned."""
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(text, stacklevel=stacklevel + 1)
    return True
