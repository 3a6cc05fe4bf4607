"""Whisper (attention encoder-decoder): the architecture entry.

``WHISPER`` names the model class and converters as strings, so importing this package
imports neither torch nor the converters; ``oasr.models`` registers it lazily.
"""

from __future__ import annotations

from oasr.models.registry import ModelEntry

WHISPER = ModelEntry(
    name="whisper",
    model_cls="oasr.models.whisper.model:WhisperModel",
    converters=(
        "oasr.models.whisper.converters:HfWhisperConverter",
        "oasr.models.whisper.converters:Ct2WhisperConverter",
    ),
    families=("aed",),
    modes=("offline",),
    source_formats=("hf", "ctranslate2", "native"),
    description="OpenAI Whisper: log-mel conv + transformer encoder, autoregressive decoder",
)

__all__ = ["WHISPER"]
