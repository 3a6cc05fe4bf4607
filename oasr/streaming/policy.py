"""How a model streams: the ``StreamPolicy`` the recognizer picks once, at construction.

- ``ChunkwisePolicy`` (``oasr.streaming.chunkwise``): the encoder declares a chunk-wise runtime
  (``streaming_kind`` ``paged`` / ``slot`` / ``stateful``); the decode family's registered
  ``streaming_session`` continues its search chunk by chunk (CTC, transducer).
- ``RedecodePolicy`` (``oasr.streaming.redecode``): the encoder reads a fixed window
  (Whisper-like AED and LLM families); the buffer is decoded again every step and what two
  decodes agree on is committed.

A policy owns its per-stream state: ``open`` attaches it to the stream (``stream.state``),
``close`` releases it; everything else the recognizer asks goes through the methods below, so
the recognizer never asks which policy it holds.
"""

from __future__ import annotations

from typing import Any, Protocol

from oasr.engine.streaming_backend import streaming_encoder
from oasr.streaming.chunkwise import ChunkwisePolicy
from oasr.streaming.redecode import RedecodePolicy
from oasr.streaming.stream import Stream, StreamOptions, StreamResult


class StreamPolicy(Protocol):
    kind: str  # what the run summary names: the runtime kind, or "re-decode"

    def open(self, stream: Stream) -> None:
        """Check the stream's options and attach its state (``stream.state``)."""
        ...

    def close(self, stream: Stream) -> None:
        """Release the stream's state (runtime slots, K/V pages)."""
        ...

    def is_ready(self, stream: Stream) -> bool:
        """A decode step would advance the stream (its detector trace is up to date)."""
        ...

    def decode(self, streams: list[Stream]) -> None:
        """One step for every ready stream among ``streams``, batched."""
        ...

    def result(self, stream: Stream) -> StreamResult:
        """The current utterance so far, or its final."""
        ...

    def reset(self, stream: Stream) -> None:
        """Start the next utterance: after a final, where it ended; otherwise the current
        hypothesis is dropped and it starts at the decoded head."""
        ...


def choose_policy(engine: Any, options: StreamOptions) -> StreamPolicy:
    """The policy for ``engine``'s model: chunk-wise when its encoder declares a streaming
    runtime, re-decode otherwise. Raises ``ValueError`` naming the fix when neither serves."""
    if streaming_encoder(engine.model).streaming_kind != "none":
        return ChunkwisePolicy(engine, options)
    return RedecodePolicy(engine, options)
