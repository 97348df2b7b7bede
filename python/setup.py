"""setup.py: builds the C library with the checkout's Makefile (`make
build/libcoconet.so` in the folder above this one) and puts it inside the
package, so `pip install ./python` gives a package that needs nothing else."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "Makefile")):
            raise RuntimeError("coconet: build from a checkout (the Makefile above python/ "
                               "is missing)")
        subprocess.run(["make", "-C", ROOT, "build/libcoconet.so"], check=True)
        target = os.path.join(self.build_lib, "coconet")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "build", "libcoconet.so"), target)


setup(cmdclass={"build_py": BuildWithLibrary})
