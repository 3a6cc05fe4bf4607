"""``oasr transcribe``'s flag values checked before anything is loaded: each bad value is one
line saying what is wrong and what to pass instead (``FlagError``), never a traceback from
deep inside torch."""

from __future__ import annotations

import re

__all__ = ["FlagError", "check_device", "check_flags"]

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_DTYPES = ("auto", "fp32", "float32", "fp16", "float16", "bf16", "bfloat16")
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
CUDA_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cu126"


class FlagError(ValueError):
    """A flag value the run cannot use; the message names the flag and the fix."""


def check_device(device: str) -> None:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``, and CUDA only where torch can reach a GPU."""
    if not _DEVICE.match(device):
        hint = " (NVIDIA GPUs are 'cuda')" if device.lower() in ("gpu", "nvidia") else ""
        raise FlagError(f"--device {device}: not a device this build runs on{hint}; use auto, "
                        "cpu, cuda or cuda:N")
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        build = ("this torch build has no CUDA" if torch.version.cuda is None
                 else "torch sees no CUDA GPU (check the driver: nvidia-smi)")
        raise FlagError(f"--device {device}: {build}; use --device cpu, or on a machine with "
                        f"an NVIDIA GPU install a CUDA build of torch ({CUDA_TORCH})")
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise FlagError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA "
                        f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def check_flags(*, device: str, dtype: str, batch_size: int | None, limit: int | None,
                max_cue_chars: int, max_cue_seconds: float, cue_gap: float) -> None:
    """Every value-range check of the command's flags; raises :class:`FlagError`."""
    if batch_size is not None and batch_size < 1:
        raise FlagError(f"--batch-size {batch_size}: must be at least 1 (rows per encoder "
                        "batch); the default is 16 on CPU, from the free memory on CUDA")
    if limit is not None and limit < 1:
        raise FlagError(f"--limit {limit}: must be at least 1 (leave it out for every row)")
    if dtype not in _DTYPES:
        raise FlagError(f"--dtype {dtype}: use one of {', '.join(_DTYPES)}")
    if max_cue_chars < 1:
        raise FlagError(f"--max-cue-chars {max_cue_chars}: must be at least 1")
    if not max_cue_seconds > 0:
        raise FlagError(f"--max-cue-seconds {max_cue_seconds}: must be > 0")
    if cue_gap < 0:
        raise FlagError(f"--cue-gap {cue_gap}: must be >= 0")
    check_device(device)
