"""The build specs of the native code: the host extension ``oasr._C`` (``HOST_EXTENSION``,
read by ``setup.py``) and each CUDA kernel library, shared by the JIT and by a prebuilt build.
Every native source lives under ``oasr/csrc/``: ``host/`` (C++, pybind11) and ``kernels/``
(framework-free CUDA headers and launchers, which the host code includes too).

A ``BuildSpec`` is everything that makes a library: its launcher sources (one translation unit,
under ``oasr/csrc/kernels``, shipped inside the package), the nvcc flags, and the table of
launchers it exports with each one's parameter codes. The JIT (``oasr.kernels.jit``) compiles a
spec on first use; ``setup.py`` compiles the same specs at install time when ``OASR_CUDA_ARCH``
names a target and nvcc is found (the libraries land in ``oasr/kernels/prebuilt/``). Either way
the loaded library's own table (``oasr_<name>_signatures()``, derived from the launchers'
prototypes by oasr/csrc/kernels/common/signatures.cuh) must equal the spec's, or loading raises.

Stdlib only (``setup.py`` loads this file by path, before torch exists in the build).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["ARG_CODES", "BASE_FLAGS", "BuildSpec", "HOST_EXTENSION", "HostExtension",
           "KernelBuildError", "LIBRARIES",
           "SignatureMismatch", "buildable", "check_signatures", "csrc_root", "find_nvcc",
           "format_signatures", "nvcc_command", "parse_signatures", "prebuilt_dir",
           "prebuilt_library", "register_library", "toolchain_available"]

ARG_CODES = ("ptr", "i32", "u32", "i64", "u64", "f32", "f64")
BASE_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
                               "--expt-relaxed-constexpr", "-lineinfo")
_PACKAGE = Path(__file__).resolve().parents[1]  # the installed (or source) ``oasr`` package


@dataclass(frozen=True)
class HostExtension:
    """The CPU extension: every ``.cc`` under ``source_root``, compiled with ``include_dirs``
    (paths relative to the repository root; the kernels' ``*.cuh`` are shared with the host)."""

    name: str
    source_root: str
    include_dirs: tuple[str, ...]
    cxx_std: int = 17
    compile_args: tuple[str, ...] = ("-O3",)

    def sources(self, root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in (root / self.source_root).rglob("*.cc"))


HOST_EXTENSION = HostExtension("oasr._C", "oasr/csrc/host",
                               ("oasr/csrc/host", "oasr/csrc/kernels"))


class KernelBuildError(RuntimeError):
    """nvcc is missing, a kernel source is missing, or a library failed to compile."""


class SignatureMismatch(RuntimeError):
    """A library's exported launcher table differs from its binding's declarations."""


@dataclass(frozen=True)
class BuildSpec:
    """One kernel library.

    ``signatures`` maps each exported launcher to its parameter codes (``ARG_CODES``), in order;
    they are the binding's declarations, set as the launchers' ctypes ``argtypes`` at load.
    """

    name: str
    sources: tuple[str, ...]
    signatures: Mapping[str, tuple[str, ...]] = field(hash=False, compare=False)
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for fn, codes in self.signatures.items():
            bad = [c for c in codes if c not in ARG_CODES]
            if bad:
                raise ValueError(f"{self.name}: {fn} declares unknown parameter codes {bad}; "
                                 f"valid: {', '.join(ARG_CODES)}")

    @property
    def table_symbol(self) -> str:
        """The exported function returning the library's launcher table."""
        return f"oasr_{self.name}_signatures"


def _codes(text: str) -> tuple[str, ...]:
    return tuple(c for c in text.replace(" ", "").split(",") if c)


LIBRARIES: dict[str, BuildSpec] = {}


def register_library(spec: BuildSpec) -> BuildSpec:
    if spec.name in LIBRARIES and LIBRARIES[spec.name] != spec:
        raise ValueError(f"kernel library {spec.name!r} is already registered differently")
    LIBRARIES[spec.name] = spec
    return spec


_MEL_LOG = _codes("ptr, i64, i64, i32, i32, ptr, ptr, ptr, i32, i32, i32, f32, ptr, ptr, i64, "
                  "ptr, ptr")
FEATURES_CUDA = register_library(BuildSpec(
    name="features_cuda",
    sources=("features/features_cuda.cu",),
    signatures={
        "oasr_features_kaldi_frames": _codes(
            "ptr, i64, i64, ptr, ptr, ptr, i32, i32, i32, i64, f32, f32, i32, f32, i32, f32, "
            "ptr, ptr, i64, ptr"),
        "oasr_features_whisper_frames": _codes(
            "ptr, i64, i64, ptr, ptr, i32, i32, i32, i64, i64, ptr, ptr"),
        "oasr_features_mel_log_f32": _MEL_LOG,
        "oasr_features_mel_log_f64": _MEL_LOG,
        "oasr_features_whisper_normalize": _codes("ptr, ptr, i64, i64, f32, ptr"),
    },
))
CTC_CUDA = register_library(BuildSpec(
    name="ctc_cuda",
    sources=("ctc/ctc_cuda.cu",),
    signatures={
        "oasr_ctc_sizes": _codes("ptr, ptr, ptr"),
        "oasr_ctc_reset": _codes("ptr, ptr, i32, ptr"),
        "oasr_ctc_chunk": _codes("ptr, ptr, i32, ptr, ptr, i32, i32, ptr, i32, i32, f64, ptr"),
        "oasr_ctc_finalize": _codes("ptr, ptr, i32, i32, i32, ptr, ptr, ptr, ptr, ptr, ptr, ptr"),
    },
))
PAGED_DECODE = register_library(BuildSpec(
    name="paged_decode",
    sources=("attention/paged_decode.cu",),
    signatures={
        "oasr_paged_decode_preload": (),
        "oasr_paged_decode": _codes("ptr, i32, i32, i32, ptr"),
    },
))

RNN_CUDA = register_library(BuildSpec(
    name="rnn_cuda",
    sources=("rnn/rnn_cuda.cu",),
    signatures={
        "oasr_rnn_preload": (),
        "oasr_rnn_recurrence": _codes("ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, "
                                      "i32, i32, ptr"),
    },
))
TRANSDUCER_CUDA = register_library(BuildSpec(
    name="transducer_cuda",
    sources=("transducer/transducer_cuda.cu",),
    signatures={
        "oasr_transducer_greedy_smem": _codes("i32, i32, i32, ptr, ptr"),
        "oasr_transducer_greedy_decode": _codes(
            "ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, i32, i32, i32, i32, i32, "
            "i32, i32, i32, i32, ptr, ptr, ptr, ptr, ptr, i32, ptr"),
    },
))
DTW_CUDA = register_library(BuildSpec(
    name="dtw_cuda",
    sources=("alignment/dtw_cuda.cu",),
    signatures={
        "oasr_dtw_max_rows": (),
        "oasr_dtw_starts": _codes("ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr"),
    },
))
QUANT_CUDA = register_library(BuildSpec(
    name="quant_cuda",
    sources=("quantization/quant_cuda.cu",),
    signatures={
        "oasr_quantize_rows_fp8": _codes("ptr, i32, i64, i64, i64, ptr, ptr, ptr"),
    },
))
WFST_CUDA = register_library(BuildSpec(
    name="wfst_cuda",
    sources=("wfst/wfst_cuda.cu",),
    signatures={
        "oasr_wfst_decode": _codes("ptr, ptr, ptr, ptr"),
        "oasr_wfst_sizes": _codes("ptr, ptr, ptr"),
    },
))


# -- where things are ------------------------------------------------------------------------


def csrc_root() -> Path:
    """The kernel sources, inside the package (``oasr/csrc/kernels``), installed or not."""
    root = _PACKAGE / "csrc" / "kernels"
    if not root.is_dir():
        raise KernelBuildError(
            f"the CUDA kernel sources are not at {root}: this OASR install is incomplete "
            "(they ship as package data; reinstall it)"
        )
    return root


def prebuilt_dir() -> Path:
    """Where an install-time build puts the libraries (``lib<name>-<arch>.so``)."""
    return _PACKAGE / "kernels" / "prebuilt"


def prebuilt_library(spec: BuildSpec, arch: str | None = None) -> Path | None:
    """The prebuilt library of ``spec`` for ``arch`` (any arch when ``None``), if installed."""
    pattern = f"lib{spec.name}-{arch or '*'}.so"
    found = sorted(prebuilt_dir().glob(pattern)) if prebuilt_dir().is_dir() else []
    return found[0] if found else None


def find_nvcc() -> Path:
    """``$OASR_NVCC``, ``$CUDA_HOME/bin/nvcc``, ``nvcc`` on PATH, /usr/local/cuda; raises naming
    the fix. ``OASR_NVCC=off`` disables building (every kernel path becomes ``cuda-toolchain``)."""
    from oasr import envs

    forced = envs.OASR_NVCC.get().strip()
    if forced.lower() == "off":
        raise KernelBuildError("kernel builds are disabled (OASR_NVCC=off)")
    if forced:
        if not Path(forced).is_file():
            raise KernelBuildError(f"OASR_NVCC={forced} is not a file")
        return Path(forced)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return Path(home) / "bin" / "nvcc"
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    if Path("/usr/local/cuda/bin/nvcc").is_file():
        return Path("/usr/local/cuda/bin/nvcc")
    raise KernelBuildError(
        "OASR's CUDA kernels are compiled on first use by nvcc, which is not found; install the "
        "CUDA toolkit (matching your driver) or set CUDA_HOME (or OASR_NVCC) to it"
    )


@lru_cache(maxsize=1)
def toolchain_available() -> bool:
    """Whether nvcc is found (cached; ``toolchain_available.cache_clear()`` re-reads). A False
    warns once, naming the fix."""
    try:
        find_nvcc()
    except KernelBuildError as exc:
        logging.getLogger("oasr.kernels").warning(
            "%s; kernels without a prebuilt library are counted under the gap "
            "'cuda-toolchain'", exc)
        return False
    return True


def buildable(spec: BuildSpec) -> bool:
    """Whether ``spec`` can be loaded here: a prebuilt library is installed or nvcc is found.
    A False sends its calls through the declared gap ``cuda-toolchain``."""
    return prebuilt_library(spec) is not None or toolchain_available()


def arch_flags(arch: str) -> list[str]:
    num = arch.removeprefix("sm_")
    # Machine code for the device plus PTX, so a newer GPU of the family still loads it.
    return [f"-gencode=arch=compute_{num},code=sm_{num}",
            f"-gencode=arch=compute_{num},code=compute_{num}"]


def nvcc_command(spec: BuildSpec, nvcc: Path, arch: str, out: Path | str) -> list[str]:
    """The one compile command of ``spec`` (the JIT and the prebuilt build both run it)."""
    root = csrc_root()
    sources = [root / s for s in spec.sources]
    for s in sources:
        if not s.is_file():
            raise KernelBuildError(f"kernel source {s} does not exist")
    return [str(nvcc), *BASE_FLAGS, *spec.flags, *arch_flags(arch), f"-I{root}",
            *map(str, sources), "-o", str(out)]


# -- the exported table ------------------------------------------------------------------------


def parse_signatures(table: str) -> dict[str, tuple[str, ...]]:
    """``"name:code,code;name2:;"`` -> ``{name: (code, ...)}``."""
    out: dict[str, tuple[str, ...]] = {}
    for item in filter(None, table.split(";")):
        name, _, codes = item.partition(":")
        out[name] = _codes(codes)
    return out


def format_signatures(signatures: Mapping[str, tuple[str, ...]]) -> str:
    return "".join(f"{name}:{','.join(codes)};" for name, codes in signatures.items())


def check_signatures(spec: BuildSpec, exported: Mapping[str, tuple[str, ...]]) -> None:
    """Raise ``SignatureMismatch`` naming every launcher whose declaration differs."""
    problems = []
    for name in sorted(set(spec.signatures) | set(exported)):
        declared, found = spec.signatures.get(name), exported.get(name)
        if declared is None:
            problems.append(f"{name} is exported but not declared")
        elif found is None:
            problems.append(f"{name} is declared but not exported")
        elif tuple(declared) != tuple(found):
            problems.append(f"{name}: declared ({', '.join(declared)}) but the library takes "
                            f"({', '.join(found)})")
    if problems:
        raise SignatureMismatch(
            f"kernel library {spec.name!r} does not match its declarations in oasr/ops/build.py: "
            + "; ".join(problems)
        )
