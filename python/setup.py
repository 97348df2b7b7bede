"""setup.py: builds with the checkout's Makefile (the folder above this one)
and puts into the package all it needs at run time, so that `pip install
./python` gives a package that needs no checkout, COCONET_HOME or
PYTHONPATH:
  - always the C library, coconet/libcoconet.so;
  - where nvcc and PyTorch's NCCL (its wheel's nvidia/nccl, 2.28 or later,
    with the device API) are found, the GPU runtime built against that NCCL
    (make RT_BUILD=build/python-rt), in coconet/_home/build with its
    cuda.conf, and the headers generated code includes (include/, rt/,
    rt/kernels/): coconet/_home is a coconet home of its own.
Variables: COCONET_NCCL_HOME=PREFIX builds against the NCCL at PREFIX
(include/nccl.h of 2.28 or later, its library in lib/) instead of
PyTorch's; COCONET_GPU=0 builds the CPU package only; COCONET_GPU=1 makes a
GPU runtime that cannot be built an error. PyTorch is looked for in the
environment being installed into, so `--no-build-isolation` is not needed
to find it, but it is to install offline (setuptools is then the
environment's own)."""
import glob
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RT_BUILD = "build/python-rt"
MIN_NCCL = 22800  # the device API and symmetric windows: NCCL 2.28


def say(text):
    print("coconet: " + text, file=sys.stderr)


def _load_nccl_header():
    """coconet/_nccl_header.py, loaded by its path (the package is not
    installed yet): the one parser of nccl.h's version, shared with it."""
    spec = importlib.util.spec_from_file_location(
        "coconet_nccl_header", os.path.join(HERE, "coconet", "_nccl_header.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nccl_version = _load_nccl_header().version  # NCCL_VERSION_CODE of include_dir's nccl.h, or None


def find_nvcc():
    """nvcc on PATH, else under CUDA_HOME or /usr/local/cuda; None if none."""
    for path in (shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if path and os.access(path, os.X_OK):
            return os.path.realpath(path)
    return None


def site_dirs():
    """Where the target environment's packages lie (also under pip's build
    isolation, which hides them from sys.path but not from sysconfig)."""
    dirs = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # old virtualenv's site module
        pass
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        dirs.insert(0, os.path.dirname(os.path.dirname(spec.origin)))
    return [d for i, d in enumerate(dirs) if d not in dirs[:i]]


def torch_nccl():
    """The prefix of PyTorch's NCCL wheel (nvidia/nccl beside torch/), or None."""
    for d in site_dirs():
        prefix = os.path.join(d, "nvidia", "nccl")
        if os.path.isdir(os.path.join(d, "torch")) and \
                os.path.exists(os.path.join(prefix, "include", "nccl.h")):
            return prefix
    return None


def nccl_choice():
    """(prefix, what it is) of the NCCL to build against, or (None, why not)."""
    env = os.environ.get("COCONET_NCCL_HOME")
    prefix, what = (env, "COCONET_NCCL_HOME") if env else (torch_nccl(), "PyTorch's")
    if prefix is None:
        return None, ("no PyTorch with its NCCL wheel (nvidia/nccl) in this environment: "
                      "install torch first, or set COCONET_NCCL_HOME to an NCCL >= 2.28")
    inc = os.path.join(prefix, "include")
    code = nccl_version(inc)
    if code is None or code < MIN_NCCL or not os.path.exists(os.path.join(inc, "nccl_device.h")):
        return None, ("%s NCCL at %s is %s, without the device API (NCCL >= 2.28 has it): "
                      "set COCONET_NCCL_HOME to an NCCL >= 2.28"
                      % (what, prefix, "version %s" % code if code else "without nccl.h"))
    return prefix, "%s NCCL %d.%d.%d (%s)" % (what, code // 10000, code // 100 % 100,
                                              code % 100, prefix)


def make(*args, **env):
    subprocess.run(["make", "-C", ROOT] + list(args), check=True, env=dict(os.environ, **env))


def build_runtime(nvcc, nccl_prefix):
    """make the GPU runtime against nccl_prefix into ROOT/RT_BUILD."""
    cuda_home = os.environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(nvcc))
    make("NVCC=" + nvcc, "NCCL_HOME=" + nccl_prefix, "RT_BUILD=" + RT_BUILD,
         RT_BUILD + "/libcoconet_cuda.so", RT_BUILD + "/cuda.conf", CUDA_HOME=cuda_home)


def copy_home(target):
    """The GPU runtime, its cuda.conf and the headers generated code
    includes, as a coconet home under target (coconet/_home)."""
    os.makedirs(os.path.join(target, "build"))
    for name in ("libcoconet_cuda.so", "cuda.conf"):
        shutil.copy2(os.path.join(ROOT, RT_BUILD, name), os.path.join(target, "build"))
    for pattern in ("include/*.h", "rt/*.h", "rt/kernels/*.cuh"):
        for src in glob.glob(os.path.join(ROOT, pattern)):
            dst = os.path.join(target, os.path.relpath(src, ROOT))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)


def gpu_plan():
    """(nvcc, NCCL prefix) to build the GPU runtime with, or None (said why)."""
    want = os.environ.get("COCONET_GPU", "")
    if want == "0":
        say("COCONET_GPU=0: the CPU package only")
        return None
    nvcc = find_nvcc()
    prefix, what = nccl_choice() if nvcc else (None, "no nvcc (install the CUDA toolkit, "
                                                     "or set CUDA_HOME)")
    if prefix is None:
        if want == "1":
            raise RuntimeError("coconet: COCONET_GPU=1 but the GPU runtime cannot be built: "
                               + what)
        say("the CPU package only: " + what)
        return None
    say("the GPU runtime against %s, with %s" % (what, nvcc))
    return nvcc, prefix


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "Makefile")):
            raise RuntimeError("coconet: build from a checkout (the Makefile above python/ "
                               "is missing)")
        make("build/libcoconet.so")
        target = os.path.join(self.build_lib, "coconet")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "build", "libcoconet.so"), target)
        home = os.path.join(target, "_home")
        shutil.rmtree(home, ignore_errors=True)  # an earlier build's
        plan = gpu_plan()
        if plan:
            build_runtime(*plan)
            copy_home(home)


class BinaryDistribution(Distribution):
    """The wheel holds shared objects: tagged for this platform."""

    def has_ext_modules(self):
        return True


if __name__ == "__main__":  # as pip's backend runs it; tests import the functions
    setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
