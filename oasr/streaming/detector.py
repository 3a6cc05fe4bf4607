"""Speech probability per frame for the streaming policy: the seam a neural VAD plugs into.

A ``FrameSpeechDetector`` reads fixed frames of ``frame_samples`` at ``sample_rate`` and returns a
speech probability per frame; ``reset`` forgets any state. The energy gate here is the
dependency-free default; a neural detector (Silero reads 512 samples at 16 kHz) implements the
same two members and replaces it through ``StreamOptions.detector``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class FrameSpeechDetector(Protocol):
    """What the streaming endpointer needs from a speech detector."""

    sample_rate: int
    frame_samples: int

    def speech_probability(self, frames: np.ndarray) -> np.ndarray:
        """frames (N, frame_samples) float32 -> (N,) speech probabilities in [0, 1]."""
        ...

    def reset(self) -> None: ...


class EnergySpeechDetector:
    """Speech where a frame's RMS is above ``threshold_dbfs`` (full scale = 1.0).

    A soft step: probability 0.5 at the threshold, rising to ~1 at ``threshold_dbfs + 6``. The
    default of -45 dBFS sits above the noise floor of read-speech corpora (LibriSpeech pauses
    measure about -60 to -50 dBFS) and well below speech (-30 to -15 dBFS); a noisier source
    needs a higher threshold or a neural detector.
    """

    def __init__(self, sample_rate: int = 16000, frame_ms: float = 30.0,
                 threshold_dbfs: float = -45.0) -> None:
        self.sample_rate = sample_rate
        self.frame_samples = max(1, int(round(sample_rate * frame_ms / 1000.0)))
        self.threshold_dbfs = threshold_dbfs

    def speech_probability(self, frames: np.ndarray) -> np.ndarray:
        rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=-1) + 1e-20)
        db = 20.0 * np.log10(rms)
        return 1.0 / (1.0 + np.exp(-(db - self.threshold_dbfs)))

    def reset(self) -> None:
        pass
