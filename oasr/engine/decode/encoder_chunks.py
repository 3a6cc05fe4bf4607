"""Decode options that reach a chunk-trained encoder: ``-d chunk_size=N``,
``-d left_context_frames=M``.

A causal (streaming-trained) encoder is decoded offline the way its recipe decodes it: attention
in chunks of ``chunk_size`` frames seeing ``left_context_frames`` back (icefall's
``--chunk-size`` / ``--left-context-frames``, in frames after its 2x subsampling, 50 Hz). The
families that decode such encoders (``transducer``, ``ctc``) carry these fields; unset, the
checkpoint's own values apply (recorded at conversion). A chunk-trained WeNet Conformer takes
them as WeNet's ``--decoding_chunk_size`` (encoder frames) and ``--num_decoding_left_chunks``
times that chunk (offline only). A model without a chunked mode refuses them by name. The
same values set the chunk-wise streaming geometry (``oasr stream``), where ``--chunk-frames``
/ ``--left-chunks`` still override them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oasr.engine.decode.options import option

__all__ = ["EncoderChunkOptions", "configure_encoder_chunks"]

CHUNK_FIELDS = ("chunk_size", "left_context_frames")


@dataclass
class EncoderChunkOptions:
    chunk_size: int | None = option(
        None, doc="Causal (chunk-trained) encoders only: attend in chunks of this many frames "
                  "(icefall's --chunk-size, 50 Hz frames; -1: the whole utterance). Unset: the "
                  "checkpoint's decode chunk size.")
    left_context_frames: int | None = option(
        None, doc="Causal encoders only, with chunk_size: frames before its chunk a frame "
                  "attends to (icefall's --left-context-frames; -1: all). Unset: the "
                  "checkpoint's.")


def configure_encoder_chunks(model: Any, options: Any) -> None:
    """Set ``model``'s chunked mode from ``options`` (unset fields: the checkpoint's values, so
    a model reused with other options does not keep earlier ones); a model without a chunked
    mode refuses set fields, naming them."""
    values = {k: getattr(options, k, None) for k in CHUNK_FIELDS}
    configure = getattr(model, "configure_chunks", None)
    if configure is not None:
        configure(**values)
        return
    chosen = [k for k, v in values.items() if v is not None]
    if chosen:
        raise ValueError(f"{', '.join(chosen)}: {type(model).__name__} has no chunked encoder "
                         "mode (a causal icefall Zipformer or a chunk-trained WeNet Conformer "
                         "has); drop the option")
