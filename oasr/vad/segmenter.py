"""Speech segments from a per-frame speech probability: shared policy for every detector.

Rules, applied to one row's trace (frame ``i`` covers ``[i, i + 1) * frame_s`` seconds):

1. hysteresis: a segment opens at the first frame with ``p >= threshold`` and closes only once
   ``p < neg_threshold`` has held for ``min_silence_ms`` (the segment ends where that silence
   began); frames in between keep the current state;
2. a closed segment shorter than ``min_speech_ms`` is dropped;
3. a segment longer than ``max_segment_s`` is split at its least-speech-like frame in the
   second half of each ``max_segment_s`` span, repeatedly, so no piece exceeds the limit;
4. each segment is padded by ``speech_pad_ms`` on both sides, clamped to the recording; where
   two padded neighbours would overlap, the gap between them is split at its middle.

The effective minimum silence is never shorter than the detector's ``min_silence_floor_ms``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SegmenterConfig:
    threshold: float = 0.5
    neg_threshold: float | None = None  # default: threshold - 0.15 (at least 0.01)
    min_speech_ms: float = 250.0
    min_silence_ms: float = 100.0
    speech_pad_ms: float = 30.0
    max_segment_s: float = math.inf

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if self.neg_threshold is not None and not 0.0 <= self.neg_threshold <= self.threshold:
            raise ValueError(f"neg_threshold must be in [0, threshold], got {self.neg_threshold}")
        if min(self.min_speech_ms, self.min_silence_ms, self.speech_pad_ms) < 0:
            raise ValueError("min_speech_ms, min_silence_ms and speech_pad_ms must be >= 0")
        if self.max_segment_s <= 0:
            raise ValueError(f"max_segment_s must be > 0, got {self.max_segment_s}")

    @property
    def low(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


def _frames(ms: float, frame_s: float) -> int:
    return int(math.ceil(ms / 1000.0 / frame_s - 1e-9))


def speech_frames(probs: np.ndarray, config: SegmenterConfig, frame_s: float,
                  min_silence_floor_ms: float = 0.0) -> list[tuple[int, int]]:
    """Rules 1-3: ``[start, end)`` frame ranges of speech, in order."""
    probs = np.asarray(probs, dtype=np.float32).reshape(-1)
    min_silence = _frames(max(config.min_silence_ms, min_silence_floor_ms), frame_s)
    min_speech = _frames(config.min_speech_ms, frame_s)
    low = config.low
    spans: list[tuple[int, int]] = []
    start: int | None = None
    silence_from: int | None = None
    for i, p in enumerate(probs.tolist()):
        if start is None:
            if p >= config.threshold:
                start, silence_from = i, None
            continue
        if p >= config.threshold:
            silence_from = None
        elif p < low:
            if silence_from is None:
                silence_from = i
            if i + 1 - silence_from >= max(min_silence, 1):
                if silence_from - start >= min_speech:
                    spans.append((start, silence_from))
                start, silence_from = None, None
    if start is not None:
        end = len(probs) if silence_from is None else silence_from
        if end - start >= min_speech:
            spans.append((start, end))
    if math.isfinite(config.max_segment_s):
        limit = max(1, int(config.max_segment_s / frame_s))
        spans = [piece for span in spans for piece in _split_long(probs, span, limit)]
    return spans


def _split_long(probs: np.ndarray, span: tuple[int, int], limit: int) -> list[tuple[int, int]]:
    start, end = span
    out = []
    while end - start > limit:
        lo = start + max(1, limit // 2)
        cut = lo + int(np.argmin(probs[lo:start + limit]))
        out.append((start, cut))
        start = cut
    out.append((start, end))
    return out


def pad_segments(spans: list[tuple[int, int]], config: SegmenterConfig, frame_s: float,
                 total_s: float) -> list[tuple[float, float]]:
    """Rule 4: frame ranges -> padded ``(start_s, end_s)`` on the row's clock."""
    pad = config.speech_pad_ms / 1000.0
    raw = [(s * frame_s, min(e * frame_s, total_s)) for s, e in spans]
    out: list[tuple[float, float]] = []
    for i, (start, end) in enumerate(raw):
        lo = 0.0 if i == 0 else (raw[i - 1][1] + start) / 2
        hi = total_s if i + 1 == len(raw) else (end + raw[i + 1][0]) / 2
        out.append((max(start - pad, lo), min(end + pad, hi)))
    return out

def segment(probs: np.ndarray, frame_s: float, total_s: float,
            config: SegmenterConfig = SegmenterConfig(),
            min_silence_floor_ms: float = 0.0) -> list[tuple[float, float]]:
    """One row's speech segments as ``(start_s, end_s)``, padded, in order, non-overlapping."""
    spans = speech_frames(probs, config, frame_s, min_silence_floor_ms)
    return pad_segments(spans, config, frame_s, total_s)
