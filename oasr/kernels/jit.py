"""Compile a kernel library with ``nvcc`` on first use; cache it by a hash of what built it.

The libraries include no framework headers (they take raw device pointers and a stream), so a
compile takes seconds rather than the minute a torch extension costs, and the binding is
``ctypes``. The cache key covers every source and header under ``csrc/kernels/`` the library
may include, the flags, the target architecture and ``nvcc --version``: editing a kernel, moving
to another GPU or another toolkit builds afresh, anything else reuses the library. Concurrent
first uses wait on a file lock; the library is written under a temporary name and renamed.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from oasr import envs
from oasr.layers._backend import KernelGap, declare_gap

__all__ = ["LIBRARIES", "CUDA_TOOLCHAIN", "KernelBuildError", "available", "csrc_root",
           "find_nvcc", "target_arch", "library_path", "library_state", "load"]

# Every kernel library: name -> its launcher sources under csrc/kernels (one translation unit
# each). The bindings load by name; `oasr gaps` reports each one's state.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "ctc_cuda": ("ctc/ctc_cuda.cu",),
    "features_cuda": ("features/features_cuda.cu",),
    "paged_decode": ("attention/paged_decode.cu",),
}

_LOCK = threading.Lock()
_LOADED: dict[Path, ctypes.CDLL] = {}
_HEADER_SUFFIXES = (".cuh", ".h", ".cu")
BASE_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
                               "--expt-relaxed-constexpr", "-lineinfo")


CUDA_TOOLCHAIN = declare_gap(KernelGap(
    id="cuda-toolchain",
    what="OASR's CUDA kernels cannot be built here: nvcc is not found (CUDA_HOME, PATH, "
         "/usr/local/cuda); their calls run on torch (features, attention) or on the CPU (the "
         "CTC search)",
    fix="install the CUDA toolkit matching the driver, or set CUDA_HOME to it",
))


class KernelBuildError(RuntimeError):
    """nvcc is missing or a kernel library failed to compile."""


def csrc_root() -> Path:
    """The kernel sources: the source tree's ``csrc/kernels`` (an editable install, the repo)."""
    root = Path(__file__).resolve().parents[2] / "csrc" / "kernels"
    if not root.is_dir():
        raise KernelBuildError(
            f"the CUDA kernel sources are not at {root}; the kernels compile from the source "
            "tree, so install OASR from it (`pip install -e .`)"
        )
    return root


def find_nvcc() -> Path:
    """``$CUDA_HOME/bin/nvcc``, else ``nvcc`` on PATH; raises naming the fix."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return Path(home) / "bin" / "nvcc"
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    for guess in ("/usr/local/cuda/bin/nvcc",):
        if Path(guess).is_file():
            return Path(guess)
    raise KernelBuildError(
        "OASR's CUDA kernels are compiled on first use by nvcc, which is not on PATH; install the "
        "CUDA toolkit (matching your driver) or set CUDA_HOME to it"
    )


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether kernel libraries can be built here (nvcc found). Callers route around a False
    through the declared gap ``cuda-toolchain``, counted, with one warning."""
    try:
        find_nvcc()
    except KernelBuildError as exc:
        import logging

        logging.getLogger("oasr.kernels").warning("%s; the kernels' calls are counted under "
                                                  "the gap 'cuda-toolchain'", exc)
        return False
    return True


@lru_cache(maxsize=4)
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], check=True, capture_output=True,
                          text=True).stdout


def target_arch() -> str:
    """``sm_XY`` of the current CUDA device, or ``$OASR_CUDA_ARCH`` (e.g. to build without one)."""
    forced = envs.OASR_CUDA_ARCH.get().strip()
    if forced:
        return forced if forced.startswith("sm_") else f"sm_{forced.replace('.', '')}"
    import torch

    if not torch.cuda.is_available():
        raise KernelBuildError("no CUDA device to build kernels for; set OASR_CUDA_ARCH (e.g. "
                               "sm_90) to compile without one")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _arch_flags(arch: str) -> list[str]:
    num = arch.removeprefix("sm_")
    # Machine code for the device plus PTX, so a newer GPU of the family still loads it.
    return [f"-gencode=arch=compute_{num},code=sm_{num}",
            f"-gencode=arch=compute_{num},code=compute_{num}"]


def _key(name: str, sources: Sequence[Path], flags: Sequence[str], arch: str, nvcc: Path) -> str:
    h = hashlib.sha256()
    root = csrc_root()
    inputs = sorted({*sources, *(p for p in root.rglob("*") if p.suffix in _HEADER_SUFFIXES)})
    for path in inputs:
        h.update(str(path.relative_to(root) if path.is_relative_to(root) else path).encode())
        h.update(path.read_bytes())
    h.update("\0".join([name, arch, *flags, _nvcc_version(str(nvcc))]).encode())
    return h.hexdigest()[:16]


def library_path(name: str, sources: Sequence[str | Path], *, flags: Sequence[str] = (),
                 arch: str | None = None) -> Path:
    """Where ``load`` keeps the library (built or not)."""
    nvcc = find_nvcc()
    paths = [_source(s) for s in sources]
    arch = arch or target_arch()
    all_flags = [*BASE_FLAGS, *flags]
    key = _key(name, paths, all_flags, arch, nvcc)
    return envs.cache_dir() / "jit" / f"{name}-{key}" / f"lib{name}.so"


def _source(s: str | Path) -> Path:
    p = Path(s)
    p = p if p.is_absolute() else csrc_root() / p
    if not p.is_file():
        raise KernelBuildError(f"kernel source {p} does not exist")
    return p


def build(name: str, sources: Sequence[str | Path], *, flags: Sequence[str] = (),
          arch: str | None = None) -> Path:
    """Compile (once per cache key) and return the library's path."""
    nvcc = find_nvcc()
    paths = [_source(s) for s in sources]
    arch = arch or target_arch()
    lib = library_path(name, paths, flags=flags, arch=arch)
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with open(lib.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.is_file():  # another process built it while we waited
            return lib
        fd, tmp = tempfile.mkstemp(dir=lib.parent, suffix=".so.tmp")
        os.close(fd)
        cmd = [str(nvcc), *BASE_FLAGS, *flags, *_arch_flags(arch), f"-I{csrc_root()}",
               *map(str, paths), "-o", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            raise KernelBuildError(
                f"nvcc failed building kernel library {name!r} for {arch}:\n{' '.join(cmd)}\n"
                f"{proc.stderr[-4000:]}"
            )
        os.replace(tmp, lib)
    return lib


def load(name: str, sources: Sequence[str | Path], *, flags: Sequence[str] = (),
         arch: str | None = None) -> ctypes.CDLL:
    """The kernel library ``name`` built from ``sources`` (paths under ``csrc/kernels``),
    compiled on first use and loaded once per process."""
    with _LOCK:
        lib = build(name, sources, flags=flags, arch=arch)
        if lib not in _LOADED:
            _LOADED[lib] = ctypes.CDLL(str(lib))
        return _LOADED[lib]


def library_state(name: str) -> str:
    """One line for ``oasr gaps``: built (where), to be built on first use, or why not."""
    try:
        lib = library_path(name, LIBRARIES[name])
    except KernelBuildError as exc:
        return f"not buildable here: {str(exc).split(';')[0]}"
    return f"built ({lib})" if lib.is_file() else "compiles on first use (nvcc found)"
