"""Word timings, the shared half: frames -> seconds, and the C++ word pass (marshalling only).

A decode family reports each token's span in encoder frames (CTC: the emitting frame;
Whisper: where cross-attention DTW put it) and its posterior; ``fill_word_timings`` asks the
tokenizer for ``token_pieces`` and hands everything to ``oasr._C.alignment.word_timings``, which
cuts the words out of the transcript. There is no Python implementation of that pass (its
statement as a test oracle lives in ``tests/engine/decode/test_alignment.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oasr.engine.request import RequestOutput, WordTiming
from oasr.native import native


@dataclass(frozen=True)
class FrameClock:
    """Seconds per encoder frame: ``frame_shift_ms x lfr_n x encoder.subsampling_rate``."""

    seconds_per_frame: float

    @classmethod
    def resolve(cls, model: Any, feature_config: Any) -> FrameClock | None:
        """``None`` when any of the three numbers is not declared (timings are then refused:
        a wrong seconds-per-frame gives spans uniformly off by a constant factor)."""
        if feature_config is None:
            return None
        rate = model.encoder.subsampling_rate
        if not feature_config.frame_shift_ms or not rate:
            return None
        return cls(float(feature_config.frame_shift_ms) * int(feature_config.lfr_n) * int(rate)
                   / 1000.0)

    def seconds(self, frame: float) -> float:
        return frame * self.seconds_per_frame


def emission_spans(frames: Sequence[int], num_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame-synchronous spans that tile: a token runs from its emitting frame to the next
    token's, the last one to the end of the utterance (``num_frames``)."""
    starts = np.asarray(frames, dtype=np.float64)
    ends = np.empty_like(starts)
    if len(starts):
        ends[:-1] = starts[1:]
        ends[-1] = max(float(num_frames), starts[-1] + 1.0)
    return starts, ends


def fill_word_timings(out: RequestOutput, tokenizer: Any, token_ids: Sequence[int],
                      starts: np.ndarray, ends: np.ndarray, probs: np.ndarray,
                      clock: FrameClock, offset: float = 0.0,
                      pieces: list[str] | None = None) -> None:
    """Set ``out.words``, ``out.timestamps`` and ``out.confidence`` for one row.

    ``starts``/``ends`` are per-token spans in encoder frames, ``probs`` per-token posteriors;
    ``offset`` (seconds) shifts the row onto its recording's clock; ``pieces``: the tokens'
    ``token_pieces`` when the caller already has them.
    """
    if pieces is None:
        pieces = tokenizer.token_pieces(list(token_ids))
    words, token_starts, confidence = native("alignment").word_timings(
        pieces, starts, ends, probs, clock.seconds_per_frame, offset
    )
    out.words = [WordTiming(w, s, e, c) for w, s, e, c in words]
    out.timestamps = token_starts
    out.confidence = confidence
