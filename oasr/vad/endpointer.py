"""Endpoints from a per-frame speech probability: the one endpointer, shared by every detector
and by both stream policies (``oasr.streaming``).

Each frame is classified first. A frame is speech when ``p >= speech_threshold``; without
hysteresis (``neg_threshold=None``, the default) every other frame is silence; with it a frame
is silence only when ``p < neg_threshold`` and keeps the previous frame's class in between (as
Silero's own streaming iterator does with ``threshold - 0.15``).

Then the rules, sherpa-onnx's three. A rule fires when the utterance so far satisfies all of
``must_contain_speech`` (some frame was speech), trailing silence (frames since the last speech
frame, or since the utterance began when it has none) ``>= min_trailing_silence_s`` and length
``>= min_utterance_length_s``; the first rule that fires, in order, ends the utterance and the
next one starts at the next frame. The defaults are sherpa-onnx's:

- rule 1: 2.4 s of trailing silence, speech or not (drops a stream that only hears silence);
- rule 2: 1.2 s of trailing silence after speech (the end of a sentence);
- rule 3: 20 s of utterance, whatever it holds (bounds an utterance that never pauses).

A rule's trailing silence is never shorter than the detector's ``min_silence_floor_s`` (a peaky
signal such as a CTC blank posterior has short silent runs inside words).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class EndpointRule:
    must_contain_speech: bool
    min_trailing_silence_s: float
    min_utterance_length_s: float

    def fires(self, has_speech: bool, trailing_silence_s: float, utterance_s: float,
              floor_s: float = 0.0) -> bool:
        silence = self.min_trailing_silence_s
        if silence > 0:
            silence = max(silence, floor_s)
        return ((has_speech or not self.must_contain_speech)
                and trailing_silence_s >= silence
                and utterance_s >= self.min_utterance_length_s)


@dataclass(frozen=True)
class EndpointConfig:
    """The rules (numbered 1 to 3 in ``Endpoint.rule``), the frame classification and a switch.

    speech_threshold: a frame with ``p >= speech_threshold`` is speech.
    neg_threshold: hysteresis; ``None`` (default): none, a frame below ``speech_threshold`` is
        silence.
    enabled: ``False`` classifies frames but emits no endpoint (``oasr stream --no-endpoint``).
    """

    rule1: EndpointRule = EndpointRule(False, 2.4, 0.0)
    rule2: EndpointRule = EndpointRule(True, 1.2, 0.0)
    rule3: EndpointRule = EndpointRule(False, 0.0, 20.0)
    speech_threshold: float = 0.5
    neg_threshold: float | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.speech_threshold <= 1.0:
            raise ValueError(f"speech_threshold must be in (0, 1], got {self.speech_threshold}")
        if self.neg_threshold is not None and not (
                0.0 <= self.neg_threshold <= self.speech_threshold):
            raise ValueError(f"neg_threshold must be in [0, speech_threshold="
                             f"{self.speech_threshold}], got {self.neg_threshold}")

    @property
    def rules(self) -> tuple[EndpointRule, ...]:
        return (self.rule1, self.rule2, self.rule3)


@dataclass(frozen=True)
class Endpoint:
    """An utterance boundary: ``frame`` is the first frame of the next utterance (the stream's
    frame clock); ``rule`` is 1, 2 or 3; ``has_speech``: the ended utterance held speech."""

    frame: int
    rule: int
    has_speech: bool


@dataclass
class Endpointer:
    """Walks one stream's per-frame speech probabilities, chunk by chunk (events do not depend
    on the chunking). ``frame_s`` is the detector's frame duration."""

    frame_s: float
    config: EndpointConfig = field(default_factory=EndpointConfig)
    min_silence_floor_s: float = 0.0
    frames: int = 0  # frames seen on the stream's clock
    start: int = 0  # first frame of the current utterance
    last_speech: int = -1  # last speech frame of the current utterance, -1 for none
    speaking: bool = False  # the last frame's class (what the hysteresis band keeps)

    def push(self, probabilities: np.ndarray) -> tuple[np.ndarray, list[Endpoint]]:
        """(N,) probabilities of the next N frames -> their classes (N,) bool (True: speech)
        and the endpoints they complete, in order."""
        cfg = self.config
        probs = np.asarray(probabilities, dtype=np.float64).reshape(-1)
        speech = np.zeros(len(probs), dtype=bool)
        out: list[Endpoint] = []
        for i, p in enumerate(probs.tolist()):
            if p >= cfg.speech_threshold:
                self.speaking = True
            elif cfg.neg_threshold is None or p < cfg.neg_threshold:
                self.speaking = False
            speech[i] = self.speaking
            if self.speaking:
                self.last_speech = self.frames
            self.frames += 1
            if not cfg.enabled:
                continue
            has_speech = self.last_speech >= 0
            tail_from = self.last_speech + 1 if has_speech else self.start
            trailing = (self.frames - tail_from) * self.frame_s
            length = (self.frames - self.start) * self.frame_s
            for rule_no, rule in enumerate(cfg.rules, start=1):
                if rule.fires(has_speech, trailing, length, self.min_silence_floor_s):
                    out.append(Endpoint(self.frames, rule_no, has_speech))
                    self.start, self.last_speech, self.speaking = self.frames, -1, False
                    break
        return speech, out
