"""Endpointing: sherpa-onnx's three rules over a speech-probability trace, shared by every model.

A rule fires when the utterance so far satisfies all three of its conditions:
``must_contain_speech`` (some frame was speech), trailing silence >= ``min_trailing_silence_s``
and utterance length >= ``min_utterance_length_s``. The defaults are sherpa-onnx's:

- rule 1: 2.4 s of trailing silence, speech or not (drops a stream that only hears silence);
- rule 2: 1.2 s of trailing silence after speech (the end of a sentence);
- rule 3: 20 s of utterance, whatever it holds (bounds an utterance that never pauses).

Silence is a frame whose speech probability is below ``speech_threshold`` (0.5).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class EndpointRule:
    must_contain_speech: bool
    min_trailing_silence_s: float
    min_utterance_length_s: float

    def fires(self, has_speech: bool, trailing_silence_s: float, utterance_s: float) -> bool:
        return ((has_speech or not self.must_contain_speech)
                and trailing_silence_s >= self.min_trailing_silence_s
                and utterance_s >= self.min_utterance_length_s)


@dataclass(frozen=True)
class EndpointConfig:
    rule1: EndpointRule = EndpointRule(False, 2.4, 0.0)
    rule2: EndpointRule = EndpointRule(True, 1.2, 0.0)
    rule3: EndpointRule = EndpointRule(False, 0.0, 20.0)
    speech_threshold: float = 0.5
    enabled: bool = True

    @property
    def rules(self) -> tuple[EndpointRule, ...]:
        return (self.rule1, self.rule2, self.rule3)


@dataclass
class Endpoint:
    """An utterance boundary: ``frame`` is the first frame of the next utterance (stream clock);
    ``rule`` is 1, 2 or 3; ``has_speech`` says whether the ended utterance held any speech."""

    frame: int
    rule: int
    has_speech: bool


@dataclass
class Endpointer:
    """Walks a per-frame speech-probability trace and emits ``Endpoint``s.

    ``frame_s`` is the detector's frame duration; the utterance restarts after each endpoint.
    """

    frame_s: float
    config: EndpointConfig = field(default_factory=EndpointConfig)
    frames: int = 0  # frames seen on the stream's clock
    start: int = 0  # first frame of the current utterance
    last_speech: int = -1  # last speech frame of the current utterance, -1 for none

    def push(self, probabilities: np.ndarray) -> list[Endpoint]:
        """(N,) probabilities of the next N frames -> the endpoints they complete, in order."""
        out: list[Endpoint] = []
        for p in np.asarray(probabilities, dtype=np.float64):
            if p >= self.config.speech_threshold:
                self.last_speech = self.frames
            self.frames += 1
            if not self.config.enabled:
                continue
            has_speech = self.last_speech >= 0
            tail_from = self.last_speech + 1 if has_speech else self.start
            trailing = (self.frames - tail_from) * self.frame_s
            length = (self.frames - self.start) * self.frame_s
            for i, rule in enumerate(self.config.rules, start=1):
                if rule.fires(has_speech, trailing, length):
                    out.append(Endpoint(self.frames, i, has_speech))
                    self.start, self.last_speech = self.frames, -1
                    break
        return out

    @property
    def in_speech_utterance(self) -> bool:
        return self.last_speech >= 0
