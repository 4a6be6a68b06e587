"""Builds sluice's small compiled core (``sluice._core``: C++ with pybind11, no CUDA, no torch) where this
machine has a C++ compiler. The core is optional: when it cannot be built, the install goes on with a warning and
sluice uses the pure-Python fallbacks of :mod:`sluice.native`, which give identical results, more slowly."""

import glob
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

try:
    from pybind11.setup_helpers import Pybind11Extension
except ImportError:  # no pybind11 (an install without build isolation): the pure-Python fallbacks only
    Pybind11Extension = None


class OptionalBuildExt(build_ext):
    """A compiler error leaves sluice without its core instead of failing the install."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001
            print(f"WARNING: sluice's compiled core was not built ({exc}); using the pure-Python fallbacks",
                  file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"WARNING: sluice's compiled core was not built ({exc}); using the pure-Python fallbacks",
                  file=sys.stderr)


ext_modules = []
if Pybind11Extension is not None:
    ext_modules.append(Pybind11Extension(
        "sluice._core",
        sorted(glob.glob("src/sluice/_core/*.cpp")),
        cxx_std=17,
        # -ffp-contract=off: no fused multiply-adds, so the arithmetic is the fallbacks' (NumPy's) to the bit
        extra_compile_args=["-O3", "-ffp-contract=off", "-fvisibility=hidden", "-pthread"],
        extra_link_args=["-pthread"],
        libraries=["dl"],
    ))

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
