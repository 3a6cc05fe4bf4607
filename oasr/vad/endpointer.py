"""Streaming endpoints from a per-frame speech probability: shared policy for every detector.

One ``Endpointer`` per stream is fed the detector's probabilities chunk by chunk. A frame is
speech when ``p >= threshold``, silence when ``p < neg_threshold``, and keeps the previous state
in between (hysteresis). It emits ``speech_start`` when an utterance's first speech frame arrives
and ``endpoint`` when any rule fires; an endpoint starts a new utterance at the next frame.

A rule fires when the trailing silence (frames since the last speech frame, or since the
utterance began when it has none) reaches ``min_trailing_silence_ms`` and the utterance is at
least ``min_utterance_ms`` long, and, with ``must_contain_speech``, has had a speech frame. The
defaults are the three rules of k2/sherpa's endpointing: 2.4 s of silence with no speech, 1.2 s
of silence after speech, and 20 s of utterance regardless. A trailing-silence threshold is never
shorter than the detector's ``min_silence_floor_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class EndpointRule:
    must_contain_speech: bool
    min_trailing_silence_ms: float
    min_utterance_ms: float


DEFAULT_RULES = (
    EndpointRule(False, 2400.0, 0.0),
    EndpointRule(True, 1200.0, 0.0),
    EndpointRule(False, 0.0, 20000.0),
)


@dataclass(frozen=True)
class EndpointConfig:
    threshold: float = 0.5
    neg_threshold: float | None = None  # default: threshold - 0.15 (at least 0.01)
    rules: tuple[EndpointRule, ...] = DEFAULT_RULES

    @property
    def low(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


@dataclass(frozen=True)
class EndpointEvent:
    """``kind`` is ``speech_start`` or ``endpoint``; ``time_s`` is on the stream's clock (the
    start of the first speech frame, or the end of the frame that fired); ``rule`` indexes
    ``EndpointConfig.rules`` for an endpoint."""

    kind: str
    time_s: float
    rule: int | None = None


@dataclass
class Endpointer:
    frame_s: float
    config: EndpointConfig = field(default_factory=EndpointConfig)
    min_silence_floor_ms: float = 0.0
    frames: int = 0  # frames seen on this stream
    utterance_start: int = 0
    last_speech: int | None = None  # index of the utterance's last speech frame
    speaking: bool = False

    def feed(self, probs: np.ndarray) -> list[EndpointEvent]:
        """probs: (n,) this chunk's probabilities -> the events they caused, in order."""
        events: list[EndpointEvent] = []
        floor = self.min_silence_floor_ms
        for p in np.asarray(probs, dtype=np.float32).reshape(-1).tolist():
            i = self.frames
            self.frames += 1
            if p >= self.config.threshold:
                self.speaking = True
            elif p < self.config.low:
                self.speaking = False
            if self.speaking:
                if self.last_speech is None:
                    events.append(EndpointEvent("speech_start", i * self.frame_s))
                self.last_speech = i
            silence_from = self.utterance_start if self.last_speech is None else (
                self.last_speech + 1)
            trailing_ms = (self.frames - silence_from) * self.frame_s * 1000.0
            utterance_ms = (self.frames - self.utterance_start) * self.frame_s * 1000.0
            for r, rule in enumerate(self.config.rules):
                if rule.must_contain_speech and self.last_speech is None:
                    continue
                silence_needed = rule.min_trailing_silence_ms
                if silence_needed > 0:
                    silence_needed = max(silence_needed, floor)
                if trailing_ms >= silence_needed and utterance_ms >= rule.min_utterance_ms:
                    events.append(EndpointEvent("endpoint", self.frames * self.frame_s, r))
                    self.utterance_start, self.last_speech = self.frames, None
                    self.speaking = False
                    break
        return events
