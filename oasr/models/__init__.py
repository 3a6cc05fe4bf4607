"""Architectures and checkpoint formats (``oasr.models.registry``)."""

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

__all__ = [
    "MODEL_REGISTRY",
    "ModelEntry",
    "build_model_from_checkpoint",
    "list_models",
    "register_model",
]
