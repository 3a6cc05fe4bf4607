"""Speech probability per frame for the streaming policy: the seam a neural VAD plugs into.

A ``FrameSpeechDetector`` reads fixed frames of ``frame_samples`` at ``sample_rate`` and returns a
speech probability per frame; ``reset`` forgets any state. Two kinds: the dependency-free energy
gate here, and a stateful detector of the speech-detector axis (``oasr.vad``, mode ``stream``:
Silero) through ``VadFrameDetector``, whose frames go through a ``StreamingVadPool`` (the
detector's recurrent state kept per stream). ``frame_detector(name)`` builds the factory
``StreamOptions.detector`` takes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch


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


class VadFrameDetector:
    """A stream's view of a ``StreamingVadPool``: its frames go through the pool's detector
    with this stream's state (``reset`` starts a fresh state)."""

    def __init__(self, pool: Any, stream_id: str) -> None:
        self.pool = pool
        self.stream_id = stream_id
        self.sample_rate = pool.sample_rate
        self.frame_samples = pool.frame_samples
        pool.open(stream_id)

    def speech_probability(self, frames: np.ndarray) -> np.ndarray:
        if not len(frames):
            return np.zeros(0)
        chunk = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32).reshape(-1))
        probs = self.pool.probabilities({self.stream_id: chunk})[self.stream_id]
        return probs.numpy().astype(np.float64)

    def reset(self) -> None:
        self.pool.close(self.stream_id)
        self.pool.open(self.stream_id)


STREAM_DETECTORS = ("energy", "silero", "fsmn")


def frame_detector(name: str, model_dir: str | None = None) -> Callable[[int], Any]:
    """The ``StreamOptions.detector`` factory for ``oasr stream --vad NAME``.

    ``energy``: the energy gate. A name of the speech-detector axis: the detector is built once
    (weights loaded once) and shared by every stream through one ``StreamingVadPool``.

    Raises:
        ValueError: unknown name, or a detector that does not declare the ``stream`` mode
            (FSMN-VAD here: its streaming FSMN memory is not built), naming the choices.
        MissingWeightsError: the detector's weights are not installed (names the fix).
    """
    if name == "energy":
        return EnergySpeechDetector
    from oasr.vad import VADS, build_detector
    from oasr.vad.stream import StreamingVadPool

    if name not in VADS:
        raise ValueError(f"unknown speech detector {name!r}; choose from "
                         f"{', '.join(STREAM_DETECTORS)}")
    spec = VADS.get(name)
    if "stream" not in spec.modes or not spec.stateful:
        raise ValueError(f"speech detector {name!r} has no streaming mode (it declares "
                         f"{list(spec.modes)}); stream with --vad silero or --vad energy")
    detector = build_detector(name, mode="stream", model_dir=model_dir)
    pools: dict[int, StreamingVadPool] = {}
    ids = itertools.count()

    def build(sample_rate: int) -> VadFrameDetector:
        if sample_rate not in pools:
            pools[sample_rate] = StreamingVadPool(detector, spec, sample_rate)
        return VadFrameDetector(pools[sample_rate], f"s{next(ids)}")

    return build
