"""Every environment variable OASR reads, typed and documented in one place.

Read through the accessors below rather than ``os.environ`` so the set stays small and
discoverable: ``oasr gaps`` prints the runtime values in force, docs/architecture.md's table is
generated from ``ALL``, and ``tests/test_envs.py`` fails when a module of the package, a test
or a benchmark reads an ``OASR_*`` variable anywhere else. Stdlib only: the CLI's listing paths
import it without torch.
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

    def choice(self, valid: tuple[str, ...], note: str = "") -> str:
        """The value, stripped and lower-cased, refused by name unless it is one of ``valid``
        (``""``: unset)."""
        value = self.get().strip().lower()
        if value not in valid:
            named = " or ".join(repr(v) for v in valid if v)
            unset = " or leave it unset" if "" in valid else ""
            raise ValueError(f"{self.name}={value!r}: use {named}{unset}{note}")
        return value


OASR_LAYERS_BACKEND = EnvVar(
    "OASR_LAYERS_BACKEND",
    "oasr",
    "Layer backend: 'oasr' (kernels, declared gaps) or 'torch' (plain torch everywhere; the "
    "CPU oracles and the 'is it the kernels' A/B). There is no auto.",
)
OASR_CACHE_DIR = EnvVar(
    "OASR_CACHE_DIR",
    "~/.cache/oasr",
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

OASR_GPUS_FAKE = EnvVar(
    "OASR_GPUS_FAKE",
    "",
    "Testing only: 'cpu' makes `oasr transcribe --gpus N` start N CPU workers (`--device cpu`, "
    "no CUDA device visible), so the launcher runs without GPUs. Empty: real GPUs.",
)
OASR_WORKER_EVENTS = EnvVar(
    "OASR_WORKER_EVENTS",
    "",
    "Set to '1' by `oasr transcribe --gpus` in each worker it starts: the worker writes JSON "
    "event lines (start, row, done) on stdout for its parent. Not for users.",
)

# Development only: read by tests and benchmarks, never by the package.
OASR_SHARED_DATA = EnvVar(
    "OASR_SHARED_DATA",
    "",
    "Development: the folder of shared real-speech data (librispeech-test-other-70/, "
    "longform/) the tests and benchmarks read; empty: shared/data beside the repository.",
)
OASR_TEST_BUNDLE = EnvVar(
    "OASR_TEST_BUNDLE",
    "",
    "Development: a converted Whisper bundle the real-weights GPU test loads instead of the "
    "packaged tiny.en.",
)
OASR_TEST_AUDIO_NPZ = EnvVar(
    "OASR_TEST_AUDIO_NPZ",
    "",
    "Development: an .npz of int16 clips (ids, lengths, samples) the real-weights GPU test reads "
    "instead of the shared LibriSpeech audio.",
)

RUNTIME: tuple[EnvVar, ...] = (OASR_LAYERS_BACKEND, OASR_CACHE_DIR, OASR_CUDA_ARCH, OASR_NVCC,
                               OASR_LANGUAGE_ID, OASR_NEMO_MAX_BYTES, OASR_GPUS_FAKE,
                               OASR_WORKER_EVENTS)
DEVELOPMENT: tuple[EnvVar, ...] = (OASR_SHARED_DATA, OASR_TEST_BUNDLE, OASR_TEST_AUDIO_NPZ)
ALL: tuple[EnvVar, ...] = RUNTIME + DEVELOPMENT


def language_id_enabled() -> bool:
    return OASR_LANGUAGE_ID.choice(("auto", "off")) == "auto"


def layers_backend() -> str:
    return OASR_LAYERS_BACKEND.choice(("oasr", "torch"), " (there is no 'auto')")


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


def gpus_fake_cpu() -> bool:
    """Whether ``--gpus`` workers are faked on the CPU (``OASR_GPUS_FAKE=cpu``)."""
    return OASR_GPUS_FAKE.choice(("", "cpu")) == "cpu"


def worker_events() -> bool:
    """Whether this process is a ``--gpus`` worker reporting to its parent."""
    return OASR_WORKER_EVENTS.choice(("", "0", "1")) == "1"


def _optional_path(var: EnvVar) -> Path | None:
    value = var.get().strip()
    return Path(value).expanduser() if value else None


def shared_data() -> Path | None:
    """``OASR_SHARED_DATA`` as a path, ``None`` when unset (callers pick their default)."""
    return _optional_path(OASR_SHARED_DATA)


def bundle_under_test() -> Path | None:
    return _optional_path(OASR_TEST_BUNDLE)


def audio_npz_under_test() -> Path | None:
    return _optional_path(OASR_TEST_AUDIO_NPZ)
