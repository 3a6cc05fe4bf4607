"""Builds the native extension ``oasr._C`` (CPU C++, pybind11); everything else is pyproject.

``OASR_SOURCES`` is every ``.cc`` under ``csrc/`` (CUDA sources, ``.cu``/``.cuh``, are compiled
just in time on the GPU by ``oasr.kernels.jit``, never here). Each area binds itself as a
submodule of ``oasr._C`` from ``csrc/python/module.cc``.
"""

from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

ROOT = Path(__file__).resolve().parent
OASR_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cc"))

setup(
    ext_modules=[
        Pybind11Extension(
            "oasr._C",
            OASR_SOURCES,
            include_dirs=["csrc"],
            cxx_std=17,
            extra_compile_args=["-O3"],
        )
    ],
    cmdclass={"build_ext": build_ext},
)
