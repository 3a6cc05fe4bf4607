"""The streaming-runtime axis: how an encoder's per-stream cache is owned across chunks.

An encoder reports ``streaming_kind`` (``"paged"``, ``"slot"``, ``"stateful"`` or ``"none"``);
the engine builds the backend registered under that name.
"""

from __future__ import annotations

from typing import Any

from oasr.registry import Registry


class StreamingEncoderBackend:
    """Owns per-stream encoder state: ``allocate`` / ``forward_step`` / ``free``."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        self.model = model

    def allocate(self, stream_id: int) -> None:
        raise NotImplementedError

    def forward_step(self, stream_ids: list[int], chunks: Any) -> Any:
        raise NotImplementedError

    def free(self, stream_id: int) -> None:
        raise NotImplementedError


STREAMING_BACKENDS: Registry[type[StreamingEncoderBackend]] = Registry(
    "streaming backend", entry_point_group="oasr.streaming_backends"
)


def register_streaming_backend(name: str):
    def decorator(cls: type[StreamingEncoderBackend]) -> type[StreamingEncoderBackend]:
        STREAMING_BACKENDS.register(name, cls)
        return cls

    return decorator


def build_streaming_backend(model: Any, **kwargs: Any) -> StreamingEncoderBackend:
    """The backend registered under ``model.encoder.streaming_kind``.

    Raises:
        ValueError: the kind is ``"none"``, or the encoder's declaration is inconsistent with
            its kind (``oasr.models.base.check_streaming_declaration``), naming what it lacks.
    """
    from oasr.models.base import check_streaming_declaration

    kind = model.encoder.streaming_kind
    if kind == "none":
        raise ValueError(
            f"{type(model).__name__} has no chunk-wise encoder (streaming_kind='none'); "
            "streaming needs a model whose encoder declares a streaming kind"
        )
    problems = check_streaming_declaration(model.encoder)
    if problems:
        raise ValueError(f"{type(model.encoder).__name__} declares streaming_kind={kind!r} "
                         f"but lacks: {'; '.join(problems)}")
    return STREAMING_BACKENDS.get(kind)(model, **kwargs)
