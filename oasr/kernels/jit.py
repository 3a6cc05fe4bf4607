"""Load a kernel library: the prebuilt one, else compiled with ``nvcc`` on first use and cached.

Each library is a ``BuildSpec`` (oasr/ops/build.py): its sources under the package's
``oasr/csrc/kernels``, flags and launcher table. An install-time build (``setup.py`` with
``OASR_CUDA_ARCH`` and nvcc) leaves ``oasr/kernels/prebuilt/lib<name>-<arch>.so``; otherwise the
JIT compiles the same command into ``$OASR_CACHE_DIR/jit/<name>-<hash>/``, the hash covering
every source and header under ``oasr/csrc/kernels``, the flags, the target and ``nvcc --version``
(editing a kernel, moving to another GPU or toolkit builds afresh). Concurrent first uses wait
on a file lock; the library is written under a temporary name and renamed.

Loading reads the library's exported launcher table and checks it against the spec's
declarations (``SignatureMismatch`` otherwise), then sets each launcher's ctypes ``argtypes``
from them, so a binding never hand-writes a signature.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from oasr import envs
from oasr.kernels import cuda_driver
from oasr.ops.build import (
    LIBRARIES,
    BuildSpec,
    KernelBuildError,
    buildable,
    check_signatures,
    csrc_root,
    find_nvcc,
    nvcc_command,
    parse_signatures,
    prebuilt_library,
)

__all__ = ["CTYPES", "KernelBuildError", "build", "exported_signatures", "library_path",
           "library_state", "load", "target_arch"]

CTYPES: dict[str, type] = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int32,
                           "u32": ctypes.c_uint32, "i64": ctypes.c_int64,
                           "u64": ctypes.c_uint64, "f32": ctypes.c_float,
                           "f64": ctypes.c_double}
_LOCK = threading.Lock()
_LOADED: dict[Path, ctypes.CDLL] = {}
_HEADER_SUFFIXES = (".cuh", ".h", ".cu")


@lru_cache(maxsize=4)
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], check=True, capture_output=True,
                          text=True).stdout


def target_arch() -> str:
    """``$OASR_CUDA_ARCH`` (``sm_90`` or ``9.0``), else ``sm_XY`` of the current CUDA device."""
    forced = envs.OASR_CUDA_ARCH.get().strip()
    if forced:
        return forced if forced.startswith("sm_") else f"sm_{forced.replace('.', '')}"
    import torch

    if not torch.cuda.is_available():
        raise KernelBuildError("no CUDA device to build kernels for; set OASR_CUDA_ARCH (e.g. "
                               "sm_90) to compile without one")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _key(spec: BuildSpec, arch: str, nvcc: Path) -> str:
    h = hashlib.sha256()
    root = csrc_root()
    for path in sorted(p for p in root.rglob("*") if p.suffix in _HEADER_SUFFIXES):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    h.update("\0".join([spec.name, arch, *spec.sources, *spec.flags,
                        _nvcc_version(str(nvcc))]).encode())
    return h.hexdigest()[:16]


def library_path(spec: BuildSpec, arch: str | None = None) -> Path:
    """Where the JIT keeps ``spec``'s library for ``arch`` (built or not)."""
    nvcc = find_nvcc()
    arch = arch or target_arch()
    return envs.cache_dir() / "jit" / f"{spec.name}-{_key(spec, arch, nvcc)}" / f"lib{spec.name}.so"


def build(spec: BuildSpec, arch: str | None = None, out: Path | None = None) -> Path:
    """Compile ``spec`` for ``arch`` (once per cache key, or into ``out``); its path."""
    nvcc = find_nvcc()
    arch = arch or target_arch()
    lib = out or library_path(spec, arch)
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with open(lib.parent / f".{lib.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.is_file():  # another process built it while we waited
            return lib
        fd, tmp = tempfile.mkstemp(dir=lib.parent, suffix=".so.tmp")
        os.close(fd)
        cmd = nvcc_command(spec, nvcc, arch, tmp)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            raise KernelBuildError(
                f"nvcc failed building kernel library {spec.name!r} for {arch}:\n"
                f"{' '.join(cmd)}\n{proc.stderr[-4000:]}"
            )
        os.replace(tmp, lib)
    return lib


def exported_signatures(lib: ctypes.CDLL, spec: BuildSpec) -> dict[str, tuple[str, ...]]:
    """The launcher table ``lib`` exports (``oasr_<name>_signatures()``)."""
    try:
        fn = getattr(lib, spec.table_symbol)
    except AttributeError:
        raise KernelBuildError(f"kernel library {spec.name!r} exports no {spec.table_symbol}(); "
                               "add OASR_EXPORT_SIGNATURES to its launcher file") from None
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    return parse_signatures(fn().decode())


def _bind(lib: ctypes.CDLL, spec: BuildSpec) -> ctypes.CDLL:
    check_signatures(spec, exported_signatures(lib, spec))
    for name, codes in spec.signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = [CTYPES[c] for c in codes]
        fn.restype = ctypes.c_int
    lib.oasr_error_string.argtypes, lib.oasr_error_string.restype = [ctypes.c_int], ctypes.c_char_p
    return lib


def load(spec: BuildSpec | str, arch: str | None = None) -> ctypes.CDLL:
    """The library of ``spec`` (or its name), its launchers' argtypes set from the checked
    table; the prebuilt one for the target when installed, else JIT-compiled. Once per
    process."""
    spec = LIBRARIES[spec] if isinstance(spec, str) else spec
    with _LOCK:
        try:
            arch = arch or target_arch()
        except KernelBuildError:
            if prebuilt_library(spec) is None:
                raise
            arch = None
        lib = prebuilt_library(spec, arch) or build(spec, arch)
        if lib not in _LOADED:
            _LOADED[lib] = _bind(ctypes.CDLL(str(lib)), spec)
        return _LOADED[lib]


def library_state(spec: BuildSpec | str) -> str:
    """One line for ``oasr gaps``: prebuilt, built (where), to be built on first use, or why
    not."""
    spec = LIBRARIES[spec] if isinstance(spec, str) else spec
    pre = prebuilt_library(spec)
    if pre is not None:
        return f"prebuilt ({pre})"
    if not buildable(spec):
        try:
            find_nvcc()
        except KernelBuildError as exc:
            return f"not buildable here (gap cuda-toolchain): {str(exc).split(';')[0]}"
    try:
        lib = library_path(spec, _listing_arch())
    except KernelBuildError as exc:
        return f"nvcc found; {str(exc).split(';')[0]}"
    return f"built ({lib})" if lib.is_file() else "compiles on first use (nvcc found)"


def _listing_arch() -> str:
    """``target_arch`` for a listing, without torch: ``$OASR_CUDA_ARCH``, else the driver's
    first visible device (the one a build for ``cuda`` targets)."""
    if envs.OASR_CUDA_ARCH.get().strip():
        return target_arch()
    device = cuda_driver.first_device()
    if isinstance(device, str):
        raise KernelBuildError(f"no CUDA device to build kernels for ({device}); set "
                               "OASR_CUDA_ARCH (e.g. sm_90) to compile without one")
    return device.arch
