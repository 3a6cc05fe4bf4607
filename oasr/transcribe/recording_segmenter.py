"""A recording cut into speech by a presegmenting detector: the padded segments a VAD run
decodes, the unpadded speech coverage is measured against (``oasr.transcribe.coverage``).

Below the runners in the package: the VAD-batched runner (``vad_segments``) and the coverage
check both build segmenters here, neither through the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from oasr.audio.resample import resample
from oasr.vad import VADS, SpeechDetector, build_detector
from oasr.vad.segmenter import SegmenterConfig, segment

__all__ = ["PRESEGMENT", "RecordingSegmenter", "VadRecording", "build_recording_segmenter"]

PRESEGMENT = SegmenterConfig(min_speech_ms=250.0, min_silence_ms=160.0, speech_pad_ms=400.0)


@dataclass
class VadRecording:
    """One recording's speech segments (padded, split to the window: what is decoded), its
    speech (unpadded, unsplit: what coverage is measured against), seconds from the row's
    start, and its duration."""

    segments: list[tuple[float, float]]
    duration_s: float
    speech: list[tuple[float, float]] = field(default_factory=list)


class RecordingSegmenter:
    """A presegmenting detector plus the segmenter's policy, run over whole recordings."""

    def __init__(self, detector: SpeechDetector, name: str,
                 config: SegmenterConfig | None = None) -> None:
        self.detector = detector
        self.spec = VADS.get(name)
        if "presegment" not in self.spec.modes:
            raise ValueError(f"speech detector {name!r} cannot pre-segment audio")
        self.config = config or replace(PRESEGMENT, threshold=detector.default_threshold)
        framing = self.spec.framing
        self.rates = framing.sample_rates if framing is not None else (16000,)

    def __call__(self, audio: np.ndarray, sample_rate: int,
                 max_segment_s: float) -> VadRecording:
        return self.batch([audio], sample_rate, max_segment_s)[0]

    def speech(self, audio: np.ndarray, sample_rate: int) -> list[tuple[float, float]]:
        """``audio``'s speech, unpadded and unsplit (seconds)."""
        return self.batch([audio], sample_rate, math.inf)[0].speech

    def batch(self, audios: list[np.ndarray], sample_rate: int,
              max_segment_s: float) -> list[VadRecording]:
        """Several recordings through one padded detector call, segmented each."""
        rate = sample_rate if sample_rate in self.rates else max(self.rates)
        wavs = [a if rate == sample_rate else resample(a, sample_rate, rate) for a in audios]
        lengths = torch.tensor([len(w) for w in wavs])
        x = torch.zeros(len(wavs), int(lengths.max()))
        host = x.numpy()
        for i, w in enumerate(wavs):
            host[i, : len(w)] = w
        out = self.detector.detect(x, lengths, rate)
        config = replace(self.config, max_segment_s=min(self.config.max_segment_s,
                                                         max_segment_s))
        bare = replace(self.config, speech_pad_ms=0.0, max_segment_s=math.inf)
        recs = []
        for i, audio in enumerate(audios):
            duration = len(audio) / sample_rate
            probs = out.row(i).numpy()
            floor = self.spec.min_silence_floor_ms
            recs.append(VadRecording(segment(probs, out.frame_s, duration, config, floor),
                                     duration, segment(probs, out.frame_s, duration, bare,
                                                       floor)))
        return recs


def build_recording_segmenter(name: str, device: str = "cpu", model_dir: str | None = None,
                              overrides: dict[str, float] | None = None) -> RecordingSegmenter:
    """``--vad NAME``: raises naming the fix when the detector cannot pre-segment or has no
    weights, before any row is read. ``overrides``: ``SegmenterConfig`` fields set over
    :data:`PRESEGMENT` and the detector's own threshold (``--vad-threshold`` ...)."""
    detector = build_detector(name, mode="presegment", model_dir=model_dir, device=device)
    config = replace(PRESEGMENT, threshold=detector.default_threshold)
    return RecordingSegmenter(detector, name, replace(config, **(overrides or {})))
