"""Requests in, outputs out, and the per-request decoding options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Options that change *what* is decoded: a family must declare it can act on them.
SELECTIVE_OPTIONS = ("task", "language", "prompt", "timestamps", "word_timestamps")


@dataclass
class DecodingOptions:
    """Per-request options (engine-level knobs stay on ``EngineConfig``)."""

    n_best: int | None = None
    max_new_tokens: int | None = None
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    # Whisper: text (encoded as " " + prompt.strip()) or token ids (previous windows' tokens,
    # timestamps included, as whisper conditions on them); the llm family takes text only.
    prompt: str | list[int] | None = None
    task: str | None = None
    language: str | None = None
    timestamps: bool = False  # segment times (Whisper's timestamp mode) in RequestOutput.segments
    word_timestamps: bool = False

    def validate(self) -> None:
        if self.n_best is not None and self.n_best < 1:
            raise ValueError(f"n_best must be >= 1, got {self.n_best}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.task is not None and self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {self.task!r}")

    def set_selective(self) -> list[str]:
        """The selective options this request set (non-default)."""
        out = []
        for name in SELECTIVE_OPTIONS:
            f = next(f for f in dataclasses.fields(self) if f.name == name)
            if getattr(self, name) != f.default:
                out.append(name)
        return out

    @property
    def sampling(self) -> bool:
        return self.temperature > 0


@dataclass
class Request:
    """One utterance to decode: mono float32 audio at the model's sample rate."""

    request_id: str
    audio: np.ndarray
    decoding: DecodingOptions = field(default_factory=DecodingOptions)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return int(self.audio.shape[0])


@dataclass
class WordTiming:
    word: str
    start: float
    end: float
    confidence: float


@dataclass
class RequestOutput:
    """A finished request. ``error`` is set (and ``text`` empty) when it could not be decoded."""

    request_id: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop", "length", "repetition"
    language: str | None = None
    words: list[WordTiming] | None = None
    timestamps: list[float] | None = None
    confidence: float | None = None
    # AR families: the mean log-probability of the generated tokens (Whisper's avg_logprob,
    # what its temperature fallback reads); None where a family does not report it.
    avg_logprob: float | None = None
    # Whisper: the probability of <|nospeech|> after <|startoftranscript|> (what the runner's
    # no-speech guard reads); None where a family does not report it.
    no_speech_prob: float | None = None
    nbest_texts: list[str] | None = None
    # (start, end, text) in seconds from the request audio's start; end is None for a segment
    # the audio cut off before it closed.
    segments: list[tuple[float, float | None, str]] | None = None
    # Timestamp mode: where the next window of the recording should start (seconds from this
    # request's start), None when the whole request audio is settled.
    resume_at: float | None = None
    # Timestamp mode: the generated tokens of the settled segments, timestamps included (what
    # whisper's previous-text conditioning feeds the next window).
    settled_token_ids: list[int] | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
