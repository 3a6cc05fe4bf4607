"""Architectures and checkpoint formats (``oasr.models.registry``) and the model contract
(``oasr.models.base``: ``BaseAsrModel``, ``BaseEncoder``, ``BaseDecoder``,
``TransducerPredictor``, ``Joiner``), the latter imported on first access so listing the
registry imports no torch."""

from typing import Any

from oasr.models.registry import (
    MODEL_REGISTRY,
    ModelEntry,
    build_model_from_checkpoint,
    list_models,
    register_model,
)

# Built-in architectures, imported on first use.
register_model("oasr.models.whisper:WHISPER", name="whisper")
register_model("oasr.models.conformer:CONFORMER", name="conformer")
register_model("oasr.models.qwen2_audio:QWEN2_AUDIO", name="qwen2_audio")
# FastConformer (Parakeet): one entry per head.
register_model("oasr.models.fastconformer:PARAKEET_CTC", name="parakeet_ctc")
register_model("oasr.models.fastconformer:PARAKEET_RNNT", name="parakeet_rnnt")
register_model("oasr.models.fastconformer:PARAKEET_TDT", name="parakeet_tdt")
register_model("oasr.models.zipformer:ZIPFORMER", name="zipformer")
register_model("oasr.models.nemotron_streaming:NEMOTRON_STREAMING", name="nemotron_streaming")
# Paraformer (non-autoregressive: CIF predictor + one-pass decoder).
register_model("oasr.models.paraformer:PARAFORMER", name="paraformer")

_CONTRACT = ("BaseAsrModel", "BaseDecoder", "BaseEncoder", "Joiner", "TransducerPredictor")


def __getattr__(name: str) -> Any:
    if name in _CONTRACT:
        from oasr.models import base

        return getattr(base, name)
    raise AttributeError(f"module 'oasr.models' has no attribute {name!r}")


__all__ = [
    "MODEL_REGISTRY",
    "ModelEntry",
    "build_model_from_checkpoint",
    "list_models",
    "register_model",
    *_CONTRACT,
]
