"""The floating-point dtype names every surface accepts (engine ``--dtype``, converters)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["DTYPE_NAMES", "dtype_from_name"]

# name -> torch dtype attribute; the short and the long spelling of each.
DTYPE_NAMES: dict[str, str] = {
    "fp32": "float32", "float32": "float32",
    "fp16": "float16", "float16": "float16", "half": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
}


def dtype_from_name(name: str, extra: Iterable[str] = ()) -> Any:
    """The ``torch.dtype`` called ``name``.

    Raises:
        ValueError: an unknown name, listing the valid ones (``extra``: names the caller
            resolves itself, such as ``auto``, listed first).
    """
    import torch

    if name not in DTYPE_NAMES:
        valid = [*extra, *DTYPE_NAMES]
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(valid)}")
    return getattr(torch, DTYPE_NAMES[name])
