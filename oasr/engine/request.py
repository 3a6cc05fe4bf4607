"""Requests in, outputs out, and the per-request decoding options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Options that change *what* is decoded: a family must declare it can act on them. Set means
# not at the field's default.
SELECTIVE_OPTIONS = ("task", "language", "prompt", "timestamps", "word_timestamps",
                     "prefix", "hotwords", "hotwords_score", "suppress_tokens", "suppress_blank",
                     "repetition_penalty", "no_repeat_ngram_size", "patience", "length_penalty")

# ``suppress_tokens``' stand-in for the checkpoint's own list (faster-whisper's and whisper's).
CHECKPOINT_SUPPRESS = -1


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
    # Sampling (temperature > 0): decode this many candidates and keep the best by
    # sum log p / length ** length_penalty (faster-whisper's best_of); ignored at temperature 0.
    best_of: int = 1
    # Beam search: a request ends once round(beam_size * patience) hypotheses finished
    # (openai-whisper's and CTranslate2's patience); None: 1.0.
    patience: float | None = None
    # Ranking of beam hypotheses and best_of candidates: sum log p / length ** length_penalty
    # (CTranslate2's and transformers' exponent); None: the family's option.
    length_penalty: float | None = None
    # transformers' RepetitionPenaltyLogitsProcessor over this window's transcript (prefix and
    # generated tokens); 1.0: off.
    repetition_penalty: float = 1.0
    # transformers' NoRepeatNGramLogitsProcessor over the same tokens; 0: off.
    no_repeat_ngram_size: int = 0
    # Token ids never generated; -1 stands for the checkpoint's list. An explicit list also
    # suppresses the tokenizer's special tokens, as faster-whisper's get_suppressed_tokens;
    # None or empty: nothing suppressed.
    suppress_tokens: tuple[int, ...] | None = (CHECKPOINT_SUPPRESS,)
    # The checkpoint's begin_suppress_tokens (blank, end of text) on the first generated token.
    suppress_blank: bool = True
    # Whisper: text forced as the transcript's first tokens (faster-whisper's prefix); the
    # output includes it.
    prefix: str | None = None
    # Whisper: text put in the prompt after <|startofprev|> (faster-whisper's hotwords, unused
    # with a prefix); CTC / transducer: phrases boosted in the beam (a string: comma-separated).
    hotwords: str | tuple[str, ...] | None = None
    # CTC / transducer: the bonus per matched hotword token (None: the family's option).
    hotwords_score: float | None = None

    def __post_init__(self) -> None:
        # Sequences are kept as tuples: comparable with the defaults, hashable as cache keys.
        if isinstance(self.suppress_tokens, list):
            self.suppress_tokens = tuple(self.suppress_tokens)
        if isinstance(self.hotwords, list):
            self.hotwords = tuple(self.hotwords)

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
        self._validate_rules()

    def _validate_rules(self) -> None:
        if self.best_of < 1:
            raise ValueError(f"best_of must be >= 1, got {self.best_of}")
        if self.patience is not None and self.patience <= 0:
            raise ValueError(f"patience must be > 0, got {self.patience}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0 (1.0: off), got "
                             f"{self.repetition_penalty}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0 (0: off), got "
                             f"{self.no_repeat_ngram_size}")
        bad = [t for t in self.suppress_tokens or () if not isinstance(t, int) or t < -1]
        if bad:
            raise ValueError(f"suppress_tokens takes token ids >= 0 and -1 (the checkpoint's "
                             f"list), got {bad}")
        if self.hotwords_score is not None and self.hotwords_score < 0:
            raise ValueError(f"hotwords_score must be >= 0, got {self.hotwords_score}")

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
    # Whisper, when it detected the language (multilingual checkpoint, none given): the
    # detected language's probability and every language's, most likely first (the softmax of
    # the logits after <|startoftranscript|> over the language tokens; faster-whisper's
    # info.language_probability / all_language_probs). None when the language was given.
    language_probability: float | None = None
    all_language_probs: list[tuple[str, float]] | None = None
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
