"""The streaming-runtime axis: how an encoder's per-stream cache is owned across chunks.

An encoder reports ``streaming_kind`` (``"paged"``, ``"slot"``, ``"stateful"`` or ``"none"``);
the engine builds the backend registered under that name. A backend owns the per-stream state:
``allocate(stream_id)`` before a stream's first chunk, ``forward_step(stream_ids, chunks,
chunk_lens)`` for one chunk of every stream in a cohort (one batched forward), ``free(stream_id)``
when it ends.

Built in: ``stateful`` (``oasr.engine.stateful_backend``: a list of state tensors per stream,
for any encoder with ``get_streaming_init_states`` / ``streaming_forward``), ``slot``
(``oasr.engine.slot_backend``: fixed-extent states declared by ``slot_state_specs``
(``oasr.models.base.StreamingStateSpec``) in a slot cache, CUDA-graph captured per
power-of-two width) and ``paged``
(``oasr.engine.paged_backend``: attention K/V growing in a paged pool, windowed, beside the
declared ``streaming_state_specs``).
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.registry import Registry


def streaming_encoder(model: Any) -> Any:
    return getattr(model, "encoder", model)


class StreamingEncoderBackend:
    """Owns per-stream encoder state: ``allocate`` / ``forward_step`` / ``free``."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        self.model = model
        self.encoder = streaming_encoder(model)

    def allocate(self, stream_id: int) -> None:
        raise NotImplementedError

    def forward_step(self, stream_ids: list[int], chunks: torch.Tensor,
                     chunk_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """chunks (B, T, F) of streams ``stream_ids`` -> (out (B, T', C), out_lens (B,))."""
        raise NotImplementedError

    def free(self, stream_id: int) -> None:
        raise NotImplementedError


STREAMING_BACKENDS: Registry[type[StreamingEncoderBackend]] = Registry(
    "streaming backend", entry_point_group="oasr.streaming_backends"
)
STREAMING_BACKENDS.register("stateful", "oasr.engine.stateful_backend:StatefulStreamingBackend")
STREAMING_BACKENDS.register("slot", "oasr.engine.slot_backend:SlotStreamingBackend")
STREAMING_BACKENDS.register("paged", "oasr.engine.paged_backend:PagedStreamingBackend")


def register_streaming_backend(name: str):
    def decorator(cls: type[StreamingEncoderBackend]) -> type[StreamingEncoderBackend]:
        STREAMING_BACKENDS.register(name, cls)
        return cls

    return decorator


def build_streaming_backend(model: Any, **kwargs: Any) -> StreamingEncoderBackend:
    """The backend registered under ``model.encoder.streaming_kind``.

    Raises:
        ValueError: the kind is ``"none"``, the encoder's declaration is inconsistent with its
            kind (``oasr.models.base.check_streaming_declaration``), naming what it lacks, or
            no runtime is registered under the kind.
    """
    from oasr.models.base import check_streaming_declaration

    encoder = streaming_encoder(model)
    kind = getattr(encoder, "streaming_kind", "none")
    if kind == "none":
        raise ValueError(
            f"{type(model).__name__} has no chunk-wise encoder (streaming_kind='none'); "
            "streaming needs a model whose encoder declares a streaming kind"
        )
    problems = check_streaming_declaration(encoder)
    if problems:
        raise ValueError(f"{type(encoder).__name__} declares streaming_kind={kind!r} "
                         f"but lacks: {'; '.join(problems)}")
    return STREAMING_BACKENDS.get(kind)(model, **kwargs)
