"""OASR: a GPU-first speech-recognition inference engine."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def from_pretrained(src: str | None = None, architecture: str | None = None) -> Any:
    """Load a model from a bundle, checkpoint folder, model package or Hub id.

    See ``oasr.models.loader.load_pretrained``.
    """
    from oasr.models.loader import load_pretrained

    return load_pretrained(src, architecture)
