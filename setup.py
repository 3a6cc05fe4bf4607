"""Builds the native extension ``oasr._C`` (CPU C++, pybind11) and, when asked, the CUDA kernel
libraries; everything else is pyproject.

Every native source lives under ``oasr/csrc/`` and every build spec in ``oasr/ops/build.py``:
``HOST_EXTENSION`` is every ``.cc`` under ``oasr/csrc/host/``; each area binds itself as a
submodule of ``oasr._C`` from ``oasr/csrc/host/python/module.cc``. The CUDA sources
(``oasr/csrc/kernels``, shipped as package data) are compiled just in time by
``oasr.kernels.jit``; with ``OASR_CUDA_ARCH`` set (e.g. ``sm_90``) and nvcc found, ``build_py``
also compiles every library of ``oasr/ops/build.py``'s specs into ``oasr/kernels/prebuilt/``
(the same command the JIT runs), which ``jit.load`` then uses for that target.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _build_specs():
    """oasr/ops/build.py, loaded by path: it is stdlib-only, and torch is not in the build."""
    sys.path.insert(0, str(ROOT))  # its nvcc lookup reads oasr.envs
    spec = importlib.util.spec_from_file_location("_oasr_build_specs", ROOT / "oasr/ops/build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class BuildPyWithKernels(build_py):
    def run(self) -> None:
        super().run()
        arch = os.environ.get("OASR_CUDA_ARCH", "").strip()
        if not arch:
            return
        arch = arch if arch.startswith("sm_") else f"sm_{arch.replace('.', '')}"
        specs = _build_specs()
        try:
            nvcc = specs.find_nvcc()
        except specs.KernelBuildError as exc:
            print(f"oasr: not prebuilding the CUDA kernels ({exc}); they compile on first use",
                  file=sys.stderr)
            return
        out = Path(self.build_lib) / "oasr" / "kernels" / "prebuilt"
        out.mkdir(parents=True, exist_ok=True)
        for lib in specs.LIBRARIES.values():
            cmd = specs.nvcc_command(lib, nvcc, arch, out / f"lib{lib.name}-{arch}.so")
            print(" ".join(cmd), file=sys.stderr)
            subprocess.run(cmd, check=True)


HOST = _build_specs().HOST_EXTENSION

setup(
    ext_modules=[
        Pybind11Extension(
            HOST.name,
            HOST.sources(ROOT),
            include_dirs=list(HOST.include_dirs),
            cxx_std=HOST.cxx_std,
            extra_compile_args=list(HOST.compile_args),
        )
    ],
    cmdclass={"build_ext": build_ext, "build_py": BuildPyWithKernels},
)
