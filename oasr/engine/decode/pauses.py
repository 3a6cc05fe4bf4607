"""Pauses in a request's audio, in encoder frames, for snapping derived token spans.

A pause is a run of frames at least ``min_pause_s`` long whose energy is ``below_db`` under the
audio's loud frames (the 95th percentile of frame energy), so the level adapts to each
recording. Only the ``aed`` aligner uses it: frame-synchronous families record when a token was
emitted and need no correction.
"""

from __future__ import annotations

import numpy as np

LOUD_PERCENTILE = 95.0


def speech_pauses(audio: np.ndarray, sample_rate: int, seconds_per_frame: float,
                  below_db: float = 40.0, min_pause_s: float = 0.3
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the pauses in ``audio`` (N,) float32, in frames of
    ``seconds_per_frame``, ordered and disjoint; float64 for the span arithmetic."""
    hop = int(round(seconds_per_frame * sample_rate))
    n = len(audio) // hop
    if n == 0:
        empty = np.zeros(0)
        return empty, empty
    frames = np.asarray(audio[:n * hop], dtype=np.float64).reshape(n, hop)
    energy = 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-10)
    quiet = energy < np.percentile(energy, LOUD_PERCENTILE) - below_db
    edges = np.diff(np.concatenate(([0], quiet.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    keep = (ends - starts) * seconds_per_frame >= min_pause_s
    return starts[keep].astype(np.float64), ends[keep].astype(np.float64)
