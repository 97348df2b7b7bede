"""coconet.torch._build: building programs into the cache for coconet.torch:
one rank of a machine at a time (a lock file in the cache: the first rank
builds, the others then find the objects, and no collective waits on
nvcc's minutes), and several programs at once (nvcc compiles one program
on one core: child processes, python -m coconet._build_one), for the tp
layers' prebuild and the optimizer's buckets."""
import contextlib
import fcntl
import json
import os
import subprocess
import sys
from typing import Iterator, List, Mapping, Optional, Sequence, Tuple

from .. import _session as S

# (the .coco file, schedule, sizes, ranks, the NCCL headers' home or None)
Build = Tuple[str, str, Mapping[str, int], int, Optional[str]]


def cache_dir() -> str:
    c = os.environ.get("COCONET_CACHE")
    if c:
        return c
    x = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(x, "coconet") if x else os.path.join(os.path.expanduser("~"), ".cache",
                                                               "coconet")


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Held while building (the module's documentation)."""
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "torch-build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_locked(prog, schedule, nccl_home):
    """S.build under build_lock."""
    with build_lock():
        return S.build(prog, schedule, nccl_home=nccl_home)


def build_parallel(todo: Sequence[Build], jobs: int) -> List[str]:
    """Builds each program of todo into the cache, `jobs` child processes
    at a time; returns the errors of those that could not be built (one
    line each, naming the program). The caller holds build_lock."""
    import coconet  # the children import it from where this process does
    where = os.path.dirname(os.path.dirname(os.path.abspath(coconet.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [where] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    waiting = list(todo)
    running: List["subprocess.Popen[str]"] = []
    failed: List[str] = []
    while waiting or running:
        while waiting and len(running) < max(1, jobs):
            path, schedule, sizes, ranks, nccl_home = waiting.pop(0)
            cmd = [sys.executable, "-m", "coconet._build_one", path, schedule,
                   json.dumps(dict(sizes)), str(ranks), nccl_home or ""]
            running.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE, text=True, env=env))
        done = running.pop(0)
        _, err = done.communicate()
        if done.returncode:
            failed.append(err.strip() or "exit status %d" % done.returncode)
    return failed
