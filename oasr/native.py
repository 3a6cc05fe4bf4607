"""The compiled extension ``oasr._C``, with one clear error where it was not built.

``pip install .`` / ``pip install -e .`` compile ``oasr/csrc/host/**/*.cc`` into ``oasr._C``; there
is no Python stand-in for what it does (see docs/decoding.md, "Word timings").
"""

from __future__ import annotations

import importlib
from types import ModuleType


def native(submodule: str) -> ModuleType:
    """``oasr._C.<submodule>``; raises naming the fix when the extension is not built."""
    try:
        ext = importlib.import_module("oasr._C")
    except ImportError as exc:
        raise ImportError(
            "OASR's native extension oasr._C is not built (it holds the word-timing pass and the "
            "CPU CTC decoders); reinstall from the source tree with `pip install -e .`, which "
            f"compiles oasr/csrc/host/ (needs a C++17 compiler): {exc}"
        ) from exc
    return getattr(ext, submodule)
