"""Whisper segments whose word timings say the decoder skipped speech.

In timestamp mode Whisper sometimes jumps: from a window's start it writes the text of an
utterance 10-20 s on and closes one segment over everything between, so the utterances in
between are never decoded. The cross-attention aligner then stretches the segment's few words
over the skipped speech, each word seconds long, and those words look like coverage. The rule
that tells such a segment is openai-whisper's word anomaly score (its ``transcribe.py``, used
there for hallucinations around silences), kept to its long-word term: a word longer than
``LONG_WORD_S`` scores its excess seconds, and a segment whose first ``SCORED_WORDS`` words (not
punctuation) score at least ``SKIP_SCORE`` in all is a skip. Its other terms are left out: a
word the model doubted (low probability) or one squeezed to a few milliseconds (the aligner's
collapse on slow speech) is no sign of a jump, and both flag honest segments.

:func:`first_skip` finds the first such segment of a window's settled segments;
:func:`cut_before` keeps the segments before it, so the next window resumes where the skip began
(the sequential runner), or settles the window and leaves the speech it skipped to the coverage
repair (VAD chunks, a shorter window that jumped again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from oasr.engine.request import RequestOutput, WordTiming
from oasr.transcribe.segments import segment_offsets, word_offsets

__all__ = ["LONG_WORD_S", "SCORED_WORDS", "SKIP_SCORE", "Skip", "cut_before", "first_skip",
           "segment_score"]

LONG_WORD_S = 2.0
SCORED_WORDS = 8
SKIP_SCORE = 3.0
_PUNCTUATION = "\"'“”¿([{-.。,，!！?？:：)]}、"


@dataclass(frozen=True)
class Skip:
    """Where a window's decode jumped: its first skipped segment, and the words before it."""

    segment: int
    words: int


def segment_score(words: list[WordTiming]) -> float:
    """The anomaly score of one segment's words (module docstring)."""
    scored = [w for w in words if w.word.strip() and w.word.strip() not in _PUNCTUATION]
    return sum(max(0.0, w.end - w.start - LONG_WORD_S) for w in scored[:SCORED_WORDS])


def _segment_words(out: RequestOutput) -> list[list[WordTiming]] | None:
    """``out.words`` grouped by the settled segment whose text holds them; None when the words
    or a segment's text are not found in ``out.text``."""
    assert out.segments is not None and out.words is not None
    texts = [text for _, _, text in out.segments]
    starts = segment_offsets(out.text, texts)
    offsets = word_offsets(out.text, [{"word": w.word} for w in out.words])
    if offsets is None or any(at is None and t.strip() for at, t in zip(starts, texts)):
        return None
    groups: list[list[WordTiming]] = [[] for _ in texts]
    for w, (at, _) in zip(out.words, offsets):
        k = max((i for i, b in enumerate(starts) if b is not None and b <= at), default=0)
        groups[k].append(w)
    return groups


def first_skip(out: RequestOutput) -> Skip | None:
    """The first settled segment of ``out`` that is a skip, or None (no segments, no word
    timings, words not cut from the text, or none scores ``SKIP_SCORE``)."""
    if not out.segments or not out.words:
        return None
    groups = _segment_words(out)
    if groups is None:
        return None
    for k, words in enumerate(groups):
        if words and segment_score(words) >= SKIP_SCORE:
            return Skip(k, sum(len(g) for g in groups[:k]))
    return None


def cut_before(out: RequestOutput, skip: Skip, resume: bool = True) -> RequestOutput:
    """``out`` keeping its settled segments before ``skip``, their text and words. ``resume``:
    the next window starts at the skipped segment's start; otherwise the whole window is
    settled. The settled token ids are dropped (no token boundary per segment is kept), so a
    conditioned next window is not prompted by them."""
    assert out.segments is not None
    kept = out.segments[:skip.segment]
    return replace(out, text=" ".join(t for _, _, t in kept if t), segments=kept,
                   words=list((out.words or [])[:skip.words]),
                   resume_at=out.segments[skip.segment][0] if resume else None,
                   settled_token_ids=[])
