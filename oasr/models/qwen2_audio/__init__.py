"""Qwen2-Audio (speech LLM: Whisper-style audio tower, projector, Qwen2 causal LM): the entry.

``QWEN2_AUDIO`` names the model class and converter as strings, so importing this package
imports neither torch nor the converter; ``oasr.models`` registers it lazily.
"""

from __future__ import annotations

from oasr.models.registry import ModelEntry

QWEN2_AUDIO = ModelEntry(
    name="qwen2_audio",
    model_cls="oasr.models.qwen2_audio.model:Qwen2AudioModel",
    converters=("oasr.models.qwen2_audio.converters:HfQwen2AudioConverter",),
    families=("llm",),
    modes=("offline",),
    source_formats=("hf", "native"),
    description="Qwen2-Audio: Whisper-style audio tower + avg-pool, linear projector, Qwen2 "
                "causal LM prompted with ChatML",
)

__all__ = ["QWEN2_AUDIO"]
