"""coconet.check: what this installation's GPU path finds, a line each, and
for each missing piece one line on how to get it:

    python -m coconet.check

The GPU, nvcc, PyTorch, the GPU runtime, the NCCL its headers are of and
the NCCL this process loads (PyTorch's), a one-rank session on GPU 0,
whether the loaded NCCL has the device API and registers a symmetric
window (on a one-rank communicator), and the cache of generated code. Without a GPU it says so and exits 0 (the
CPU part needs none); with one, it exits 1 when a piece is missing."""
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

from . import _nccl_header, _session as S

FIX_INSTALL = "pip install --no-build-isolation --force-reinstall ./python (in a checkout)"


class Report:
    """Lines "name: what was found", each missing piece followed by "  fix: ..."."""

    def __init__(self, out=sys.stdout):
        self.out, self.missing = out, 0

    def found(self, name, text):
        print("%-15s %s" % (name + ":", text), file=self.out)

    def lacking(self, name, text, fix):
        self.missing += 1
        print("%-15s MISSING: %s" % (name + ":", text), file=self.out)
        print("%-15s fix: %s" % ("", fix), file=self.out)


def _run(argv):
    """A tool's output, or None when it cannot run or fails."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def gpus():
    """The GPUs' names (nvidia-smi), [] when none is seen."""
    out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    if out is None:
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def check_gpu(r):
    names = gpus()
    if names:
        r.found("GPU", "%d: %s" % (len(names), ", ".join(sorted(set(names)))))
    else:
        r.found("GPU", "none seen (nvidia-smi lists none): the CPU part works; the GPU path "
                       "needs an NVIDIA GPU and its driver")
    return bool(names)


def runtime_conf():
    """(runtime path or None, its cuda.conf as a dict, why not found)."""
    try:
        path = S.runtime_path()
    except S.CocoError as e:
        return None, {}, str(e)
    return path, S._runtime_conf(path), None


def check_nvcc(r, conf):
    nvcc = conf.get("NVCC") or shutil.which("nvcc")
    out = _run([nvcc, "--version"]) if nvcc else None
    if out is None:
        r.lacking("nvcc", "%s does not run" % nvcc if nvcc else "not on PATH",
                  "install the CUDA toolkit (nvcc builds the generated code), or set CUDA_HOME")
        return
    m = re.search(r"release ([\d.]+)", out)
    r.found("nvcc", "%s (CUDA %s)" % (nvcc, m.group(1) if m else "?"))


def check_torch(r):
    """PyTorch imported (so its NCCL is loaded first, as in a job), or None."""
    try:
        import torch
    except ImportError:
        r.lacking("torch", "not installed", "pip install torch (coconet.torch needs it)")
        return None
    r.found("torch", "%s (CUDA %s) at %s" % (torch.__version__, torch.version.cuda,
                                             os.path.dirname(torch.__file__)))
    return torch


def check_runtime(r):
    """The GPU runtime loaded (S.Runtime), or None."""
    path, conf, why = runtime_conf()
    if path is None:
        r.lacking("GPU runtime", "not installed (built where pip finds nvcc and PyTorch's "
                  "NCCL)" if "not installed" in why else why,
                  FIX_INSTALL + " on a machine with nvcc and torch")
        return None, conf
    try:
        rt = S.Runtime(path)
    except S.CocoError as e:
        r.lacking("GPU runtime", str(e), FIX_INSTALL)
        return None, conf
    home = os.environ.get("COCONET_HOME") or S.package_home() or S._checkout_home()
    r.found("GPU runtime", "%s (home %s)" % (path, home))
    return rt, conf


def check_nccl(r, rt, conf):
    """The headers' NCCL against the loaded one; True when they agree."""
    inc = conf.get("NCCL_INCLUDE", "")
    built = _nccl_header.version(inc)
    r.found("NCCL headers", "%s (%s)" % (S._v(built) if built else "unknown", inc or "?"))
    loaded = rt.nccl() if rt else None
    if loaded is None:
        r.lacking("NCCL loaded", "none answers ncclGetVersion", FIX_INSTALL)
        return False
    r.found("NCCL loaded", "%s (%s)" % (S._v(loaded[1]), loaded[0]))
    try:
        prefix = S.nccl_setup(rt.path, loaded)
    except S.CocoError as e:
        r.lacking("NCCL match", str(e).split(";")[0], FIX_INSTALL)
        return False
    r.found("NCCL match", "the runtime's headers are of the loaded NCCL" if prefix is None else
            "generated code builds against the loaded NCCL's own headers (%s/include)" % prefix)
    return True


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _nccl_calls(nccl):
    """A one-rank communicator with a symmetric window on 1 MiB of ncclMemAlloc
    memory, made and freed: "" when it worked, else the failing call."""
    P = ctypes.c_void_p
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    uid, comm, buf, win = _UniqueId(), P(), P(), P()
    steps = [("ncclGetUniqueId", lambda: nccl.ncclGetUniqueId(ctypes.byref(uid))),
             ("ncclCommInitRank", lambda: nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)),
             ("ncclMemAlloc", lambda: nccl.ncclMemAlloc(ctypes.byref(buf),
                                                        ctypes.c_size_t(1 << 20))),
             ("ncclCommWindowRegister", lambda: nccl.ncclCommWindowRegister(
                 comm, buf, ctypes.c_size_t(1 << 20), ctypes.byref(win), 1)),
             ("ncclCommWindowDeregister", lambda: nccl.ncclCommWindowDeregister(comm, win)),
             ("ncclMemFree", lambda: nccl.ncclMemFree(buf)),
             ("ncclCommDestroy", lambda: nccl.ncclCommDestroy(comm))]
    for name, call in steps:
        rc = call()
        if rc:
            return "%s: %s" % (name, nccl.ncclGetErrorString(rc).decode(errors="replace"))
    return ""


def check_device_api(r, conf, torch):
    """The headers' device API and, with a GPU, a symmetric window."""
    inc = conf.get("NCCL_INCLUDE", "")
    if not os.path.exists(os.path.join(inc, "nccl_device.h")):
        r.lacking("device API", "no nccl_device.h in %s (NCCL >= 2.28 has it)" % (inc or "?"),
                  "reinstall with COCONET_NCCL_HOME=<an NCCL >= 2.28> " + FIX_INSTALL)
        return
    nccl = ctypes.CDLL("libnccl.so.2")  # the one loaded (PyTorch's or the runtime's)
    if not hasattr(nccl, "ncclDevCommCreate"):
        r.lacking("device API", "the loaded NCCL has no ncclDevCommCreate", FIX_INSTALL)
        return
    r.found("device API", "nccl_device.h in the headers, ncclDevCommCreate in the library")
    if torch is not None:
        torch.cuda.init()
    why = _nccl_calls(nccl)
    if why:
        r.lacking("symmetric mem", why, "see NCCL's documentation of symmetric memory "
                  "(NCCL_WIN_COLL_SYMMETRIC) for what the GPU and driver need")
    else:
        r.found("symmetric mem", "a window registered on a one-rank communicator")


def check_session(r, rt):
    """A one-rank session on GPU 0 opened, described and closed."""
    try:
        s = S.Session(rt, 0, 1, 0, rt.unique_id(), arena_bytes=1 << 20)
    except S.CocoError as e:
        r.lacking("session", str(e), "the message says what failed; see also nvidia-smi")
        return
    r.found("session", s.describe())
    s.close()


def cache_dir():
    """Where generated code is built (as the CLI's: COCONET_CACHE, else
    $XDG_CACHE_HOME/coconet, else ~/.cache/coconet)."""
    c, x = os.environ.get("COCONET_CACHE"), os.environ.get("XDG_CACHE_HOME")
    return c or os.path.join(x or os.path.join(os.path.expanduser("~"), ".cache"), "coconet")


def check_cache(r):
    d = cache_dir()
    probe = d if os.path.isdir(d) else os.path.dirname(d.rstrip("/")) or "."
    if not os.access(probe, os.W_OK):
        r.lacking("cache", "%s cannot be written" % d, "set COCONET_CACHE to a writable folder")
        return
    n = len(glob.glob(os.path.join(d, "*.so")))
    r.found("cache", "%s (%d built objects)" % (d, n))


def main(out=sys.stdout):
    """Prints the report; the exit status (0: no GPU, or nothing missing)."""
    r = Report(out)
    import coconet
    from ._lib import _find
    r.found("coconet", "%s (C library %s)" % (os.path.dirname(coconet.__file__), _find()))
    has_gpu = check_gpu(r)
    torch = check_torch(r)
    rt, conf = check_runtime(r)
    check_nvcc(r, conf)
    if rt is not None:
        check_nccl(r, rt, conf)
        if has_gpu:
            check_session(r, rt)
            check_device_api(r, conf, torch)
    check_cache(r)
    if not has_gpu:
        r.found("result", "no GPU: the CPU part is ready (coconet.load, run_cpu)")
        return 0
    r.found("result", "%d missing" % r.missing if r.missing else "the GPU path is ready")
    return 1 if r.missing else 0


if __name__ == "__main__":
    sys.exit(main())
