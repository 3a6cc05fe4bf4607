"""An energy gate: speech where a 30 ms frame's RMS is above ``threshold_dbfs`` (full scale 1.0).

A soft step: probability 0.5 at the threshold, rising to ~1 at ``threshold_dbfs + 6``. The
default of -45 dBFS sits above the noise floor of read-speech corpora (LibriSpeech pauses
measure about -60 to -50 dBFS) and well below speech (-30 to -15 dBFS); a noisier source needs
a higher threshold or a neural detector. No weights and no state: each frame is judged alone,
so it serves the ``stream`` role (endpointing) at any of the declared rates.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from oasr.vad.spec import SpeechDetector, VadFraming, VadSpec

FRAME_S = 0.03
RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


class EnergyVad(SpeechDetector):
    """``detect_streaming(chunk (B, k * frame), None, sample_rate)`` -> (probs (B, k), None)."""

    def __init__(self, threshold_dbfs: float = -45.0, device: str | torch.device = "cpu") -> None:
        self.threshold_dbfs = threshold_dbfs

    def frame_probabilities(self, frames: np.ndarray) -> np.ndarray:
        """frames (..., frame_samples) -> (...) float64 speech probabilities."""
        rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=-1) + 1e-20)
        db = 20.0 * np.log10(rms)
        return 1.0 / (1.0 + np.exp(-(db - self.threshold_dbfs)))

    def detect_streaming(self, chunk: torch.Tensor, state: Any, sample_rate: int,
                         frames: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        frame = ENERGY_SPEC.framing.frame_samples[sample_rate]
        b, t = chunk.shape
        if t % frame:
            raise ValueError(f"an energy chunk is a whole number of {frame}-sample frames at "
                             f"{sample_rate} Hz, got {t} samples")
        x = chunk.detach().cpu().numpy().reshape(b, t // frame, frame)
        return torch.from_numpy(self.frame_probabilities(x)), None


ENERGY_SPEC = VadSpec(
    "energy", EnergyVad, consumes="waveform", modes=("stream",),
    framing=VadFraming(frame_samples={r: int(round(r * FRAME_S)) for r in RATES},
                       context_samples={r: 0 for r in RATES}),
)
