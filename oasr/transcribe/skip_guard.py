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
(the sequential runner) or the coverage repair decodes the speech it left (VAD chunks).
"""

from __future__ import annotations

from dataclasses import replace

from oasr.engine.request import RequestOutput, WordTiming
from oasr.transcribe.segments import word_offsets

__all__ = ["LONG_WORD_S", "SCORED_WORDS", "SKIP_SCORE", "cut_before", "first_skip",
           "segment_score"]

LONG_WORD_S = 2.0
SCORED_WORDS = 8
SKIP_SCORE = 3.0
_PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"


def segment_score(words: list[WordTiming]) -> float:
    """The anomaly score of one segment's words (module docstring)."""
    scored = [w for w in words if w.word.strip() and w.word.strip() not in _PUNCTUATION]
    score = 0.0
    for w in scored[:SCORED_WORDS]:
        score += max(0.0, w.end - w.start - LONG_WORD_S)
    return score


def _segment_words(out: RequestOutput) -> list[list[WordTiming]] | None:
    """``out.words`` grouped by the settled segment they were cut from (the text is the
    segments' texts joined by a space); None when the words are not the text's."""
    words, segments = out.words or [], out.segments or []
    offsets = word_offsets(out.text, [{"word": w.word} for w in words])
    if offsets is None:
        return None
    bounds, pos = [], 0
    for _, _, text in segments:
        if not text:
            bounds.append(pos)
            continue
        pos = out.text.find(text, pos)
        if pos < 0:
            return None
        bounds.append(pos)
        pos += len(text)
    groups: list[list[WordTiming]] = [[] for _ in segments]
    for w, (at, _) in zip(words, offsets):
        k = max((i for i, b in enumerate(bounds) if b <= at), default=0)
        groups[k].append(w)
    return groups


def first_skip(out: RequestOutput) -> int | None:
    """Index of the first settled segment of ``out`` that is a skip, or None (no segments, no
    word timings, or none scores ``SKIP_SCORE``)."""
    if not out.segments or not out.words:
        return None
    groups = _segment_words(out)
    if groups is None:
        return None
    for k, words in enumerate(groups):
        if words and segment_score(words) >= SKIP_SCORE:
            return k
    return None


def cut_before(out: RequestOutput, k: int) -> RequestOutput:
    """``out`` keeping its settled segments before the ``k``-th, their text and words; it
    resumes at the ``k``-th segment's start. The settled token ids are dropped (no token
    boundary per segment is kept), so a conditioned next window is not prompted by them."""
    assert out.segments is not None
    groups = _segment_words(out)
    kept = out.segments[:k]
    n_words = sum(len(g) for g in groups[:k]) if groups is not None else 0
    return replace(out, text=" ".join(t for _, _, t in kept if t), segments=kept,
                   words=list((out.words or [])[:n_words]), resume_at=out.segments[k][0],
                   settled_token_ids=[])
