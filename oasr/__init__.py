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


def load(model: str | None = None, **kwargs: Any) -> Any:
    """Load a model by name (``oasr models``), folder, package or Hub id, ready to
    ``transcribe``; see ``oasr.api.load``::

        model = oasr.load("whisper-tiny.en", device="cpu")
        result = model.transcribe("talk.flac")
    """
    from oasr.api import load as _load

    return _load(model, **kwargs)
