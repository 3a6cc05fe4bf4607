"""The chunks a VAD-batched recording is decoded in, and the joins between them.

Consecutive speech segments (padded, none longer than the segment limit) are merged while the
span from a chunk's first start to its last end fits ``limit_s`` (faster-whisper's batched
pipeline and WhisperX do the same). Two neighbouring chunks meet at the middle ``p`` of the gap
between them. Where that gap is a pause, each chunk keeps what it decoded. Where ``p`` lies
inside detected speech (a segment longer than the limit, split at its least speech-like frame),
a word may straddle it: each chunk then reads ``JOIN_OVERLAP_S`` past ``p`` into the other, and
a word belongs to the chunk its middle falls in (``keep_from <= middle < keep_to``), so a word
cut by the join is decoded whole on at least one side and kept on exactly one. Without word
timings there is nothing to tell the sides apart by: no overlap is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["JOIN_OVERLAP_S", "Chunk", "merge_into_chunks", "plan_chunks"]

JOIN_OVERLAP_S = 1.0


@dataclass(frozen=True)
class Chunk:
    """One chunk on the row's clock: the audio decoded (``start``, ``end``) and where the
    words it keeps lie (``keep_from``, ``keep_to``)."""

    start: float
    end: float
    keep_from: float = -math.inf
    keep_to: float = math.inf


def merge_into_chunks(segments: list[tuple[float, float]],
                      window_s: float) -> list[tuple[float, float]]:
    """Merge consecutive ``(start, end)`` segments while a chunk spans at most ``window_s``."""
    chunks: list[tuple[float, float]] = []
    for start, end in segments:
        if chunks and end - chunks[-1][0] <= window_s:
            chunks[-1] = (chunks[-1][0], end)
        else:
            chunks.append((start, end))
    return chunks


def plan_chunks(segments: list[tuple[float, float]], speech: list[tuple[float, float]],
                limit_s: float, duration_s: float, timed: bool) -> list[Chunk]:
    """The chunks of a recording: ``segments`` merged to ``limit_s``, overlapping at joins that
    lie inside ``speech`` when words are ``timed`` (module docstring)."""
    spans = merge_into_chunks(segments, limit_s)
    starts = [s for s, _ in spans]
    ends = [e for _, e in spans]
    keep_from = [-math.inf] * len(spans)
    keep_to = [math.inf] * len(spans)
    for i in range(len(spans) - 1):
        p = (ends[i] + starts[i + 1]) / 2
        keep_to[i] = keep_from[i + 1] = p
        if timed and any(a < p < b for a, b in speech):
            ends[i] = min(max(ends[i], p + JOIN_OVERLAP_S), duration_s)
            starts[i + 1] = max(min(starts[i + 1], p - JOIN_OVERLAP_S), 0.0)
    return [Chunk(a, b, lo, hi) for a, b, lo, hi in zip(starts, ends, keep_from, keep_to)]
