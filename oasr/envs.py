"""Every environment variable OASR reads, typed and documented in one place.

Read through the accessors below rather than ``os.environ`` so the set stays small and
discoverable (``oasr gaps`` prints the values in force).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str
    doc: str

    def get(self) -> str:
        return os.environ.get(self.name, self.default)


OASR_LAYERS_BACKEND = EnvVar(
    "OASR_LAYERS_BACKEND",
    "oasr",
    "Layer backend: 'oasr' (kernels, declared gaps) or 'torch' (plain torch everywhere; the "
    "CPU oracles and the 'is it the kernels' A/B). There is no auto.",
)
OASR_CACHE_DIR = EnvVar(
    "OASR_CACHE_DIR",
    str(Path.home() / ".cache" / "oasr"),
    "Where converted bundles of packaged models and JIT-compiled kernels are cached.",
)

OASR_CUDA_ARCH = EnvVar(
    "OASR_CUDA_ARCH",
    "",
    "Target of the CUDA kernel libraries, e.g. 'sm_90' (or '9.0'). JIT: empty builds for the "
    "current device; set it to compile without one. Install: `OASR_CUDA_ARCH=sm_90 pip install .` "
    "with nvcc found prebuilds every library into the package (oasr/kernels/prebuilt/).",
)
OASR_NVCC = EnvVar(
    "OASR_NVCC",
    "",
    "Path of nvcc for the kernel builds; empty: CUDA_HOME, PATH, /usr/local/cuda. 'off' builds "
    "nothing: every kernel path becomes the declared gap 'cuda-toolchain' (unless prebuilt).",
)

OASR_LANGUAGE_ID = EnvVar(
    "OASR_LANGUAGE_ID",
    "auto",
    "The language check of English-only models: 'auto' (language ID by whisper-base when "
    "oasr[multilingual] is installed, else decoder confidence alone) or 'off' (confidence alone).",
)

OASR_NEMO_MAX_BYTES = EnvVar(
    "OASR_NEMO_MAX_BYTES",
    "16G",
    "The most a .nemo archive may unpack to (its weights, config and tokenizer together): bytes, "
    "or a number with K, M, G or T (powers of 1024). A member over it is refused by name; raise "
    "it for a larger model.",
)

ALL: tuple[EnvVar, ...] = (OASR_LAYERS_BACKEND, OASR_CACHE_DIR, OASR_CUDA_ARCH, OASR_NVCC,
                           OASR_LANGUAGE_ID, OASR_NEMO_MAX_BYTES)


def language_id_enabled() -> bool:
    value = OASR_LANGUAGE_ID.get().strip().lower()
    if value not in ("auto", "off"):
        raise ValueError(f"OASR_LANGUAGE_ID={value!r}: use 'auto' or 'off'")
    return value == "auto"


def layers_backend() -> str:
    value = OASR_LAYERS_BACKEND.get().strip().lower()
    if value not in ("oasr", "torch"):
        raise ValueError(
            f"OASR_LAYERS_BACKEND={value!r} is not a backend; use 'oasr' or 'torch' "
            "(there is no 'auto')"
        )
    return value


def cache_dir() -> Path:
    return Path(OASR_CACHE_DIR.get()).expanduser()


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?$")
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def nemo_max_bytes() -> int:
    raw = OASR_NEMO_MAX_BYTES.get()
    m = _SIZE.match(raw.strip().upper())
    size = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)]) if m else 0
    if size <= 0:
        raise ValueError(f"OASR_NEMO_MAX_BYTES={raw!r} is not a size; use bytes or a number "
                         "with K, M, G or T, e.g. 32G")
    return size
