"""What the Python API returns: faster-whisper's ``Segment`` / ``TranscriptionInfo`` shape for
``Model.transcribe``, and the eager :class:`Transcript` of ``Model.transcript`` and
``Model.transcribe_batch``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oasr.io.writer import OutputRow

__all__ = ["Segment", "TranscriptionError", "TranscriptionInfo", "Transcript", "Word",
           "transcript_from_row", "words_from_dicts"]


class TranscriptionError(RuntimeError):
    """A recording could not be read or decoded; the message names it and why."""


@dataclass
class Word:
    word: str
    start: float  # seconds from the start of the recording
    end: float
    confidence: float

    @property
    def probability(self) -> float:
        """faster-whisper's name for :attr:`confidence`."""
        return self.confidence


@dataclass
class Segment:
    """A stretch of the recording's text, seconds on the recording's clock. The fields after
    ``text`` are faster-whisper's: ``id`` (0, 1, ... in the recording), ``seek`` (where the
    model window that decoded it began, seconds), ``words`` (None when word timings are off),
    and the window's decode: ``temperature``, ``avg_logprob``, ``no_speech_prob`` (None where
    the family reports none) and the segment text's ``compression_ratio``."""

    start: float
    end: float
    text: str
    id: int = 0
    seek: float = 0.0
    words: list[Word] | None = None
    temperature: float | None = None
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None


@dataclass
class TranscriptionInfo:
    """faster-whisper's ``info``: known when ``Model.transcribe`` returns (the first window is
    decoded by then), before the segments are read."""

    language: str | None
    language_probability: float | None
    all_language_probs: list[tuple[str, float]] | None
    duration: float
    duration_after_vad: float
    transcription_options: dict[str, Any]
    vad_options: dict[str, Any] | None


@dataclass
class Transcript:
    """One recording's result. ``segments`` always tile the text (phrase segments from the
    words, strictly increasing; without word timings a recording shorter than the model's
    window is one segment); ``words`` is empty when word timings are off. ``index`` is the
    recording's position in the ``transcribe_batch`` input; ``error`` is None when fine;
    ``token_ids`` the decoded tokens (to check a conversion against upstream); ``coverage``
    the detected speech seconds covered by words over those detected (None: not measured)."""

    text: str
    segments: list[Segment]
    words: list[Word]
    language: str | None
    duration: float
    confidence: float | None = None
    # The detected language's probability (None when the language was given or the model is
    # English-only): the output column of that name.
    language_probability: float | None = None
    finish_reason: str | None = None
    source: str = ""
    index: int = 0
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    coverage: float | None = None


def words_from_dicts(words: list[dict[str, Any]] | None) -> list[Word]:
    return [Word(w["word"], w["start"], w["end"], w["confidence"]) for w in words or []]


def transcript_from_row(out: OutputRow, index: int, source: str) -> Transcript:
    duration = out.duration or 0.0
    if out.segments is not None:
        segments = [Segment(s["start"], s["end"], s["text"], id=i)
                    for i, s in enumerate(out.segments)]
    elif out.text:
        segments = [Segment(0.0, duration, out.text)]
    else:
        segments = []
    return Transcript(text=out.text or "", segments=segments, words=words_from_dicts(out.words),
                      language=out.language, duration=duration, confidence=out.confidence,
                      language_probability=out.language_probability,
                      finish_reason=out.finish_reason, source=source, index=index,
                      error=out.error, warnings=list(out.warnings),
                      token_ids=list(out.token_ids or []), coverage=out.coverage)
