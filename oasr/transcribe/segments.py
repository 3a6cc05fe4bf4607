"""A recording's segments, text and words from its decoded pieces, on the recording's clock.

A *piece* is one kept decode: a window of the sequential runner, a chunk of the VAD-batched
one, or a repair of a stretch of speech nothing covered (:mod:`oasr.transcribe.coverage`). The
model's 30 s window is bookkeeping: what a user gets are phrase segments.

Segments, where words are timed: runs of consecutive words of one piece, cut

- where the model closed a segment (Whisper's timestamp tokens, where it decoded them);
- where it did not (short clips, VAD chunks, CTC and transducer families): after a word that
  ends a sentence (``.?!…`` and their full-width forms; "Mr." does not) once the segment holds
  ``MIN_SENTENCE_S``, so "Yes. No." stays one;
- at a pause of at least ``SEGMENT_PAUSE_S`` between two words;
- and a segment still longer than ``MAX_SEGMENT_S`` is cut at its longest pause, again and
  again (unpunctuated output).

Its text is the piece's text from its first word to its last (the words are literal substrings
of it), its start the first word's start and its end the last word's end, so segments are
strictly increasing and never overlap: the words are. Without word timings a piece gives the
model's segments where it decoded timestamps and otherwise one segment over its audio (a short
clip: the whole clip), each end pulled back to the next start.

Words: every piece's, in time order. Where Whisper decoded segments, a segment's first word
that lies ``STRAY_GAP_S`` before the segment's second word while touching the previous word
(the aligner put it at the end of the previous utterance) shares the second word's span, in
proportion to their characters; likewise a last word put at the start of the next utterance.
Where the coverage detector's speech is known, word edges it contradicts by a wide margin are
moved out of its pauses (:mod:`oasr.transcribe.speech_snap`) before the segments are cut. A word
shorter than ``MIN_WORD_S`` is widened into the pauses on either side, as far as they reach
(never over a neighbour).

Text: a single piece's text as decoded; several pieces' segment texts joined as the script
writes them (:func:`oasr.io.subtitles.join_words`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from oasr.io.subtitles import ends_sentence, join_words
from oasr.transcribe.speech_snap import snap_to_speech

__all__ = ["MAX_SEGMENT_S", "MIN_SENTENCE_S", "MIN_WORD_S", "SEGMENT_PAUSE_S", "Piece",
           "assemble", "floor_word_lengths", "piece_segments", "segment_offsets", "trim_piece",
           "word_offsets"]

SEGMENT_PAUSE_S = 1.0
MAX_SEGMENT_S = 12.0
MIN_SENTENCE_S = 1.0
MIN_WORD_S = 0.1
# A Whisper segment's first (last) word this far from the rest of its segment while touching
# the previous (next) segment's words was timed onto the wrong utterance.
STRAY_GAP_S = 1.0
_TOUCH_S = 0.02


@dataclass
class Piece:
    """One kept decode on the recording's clock. ``words``: dicts word/start/end/confidence
    (None: untimed); ``model_segments``: Whisper's timestamp segments (start, end, text) on the
    recording's clock, where decoded; ``start``/``end``: the audio it settled."""

    start: float
    end: float
    text: str
    words: list[dict[str, Any]] | None = None
    model_segments: list[dict[str, Any]] | None = None
    temperature: float = 0.0
    source: Any = None  # the RequestOutput it came from
    kind: str = "window"  # window, chunk or repair
    repair: list[tuple[float, float]] = field(default_factory=list)


def word_offsets(text: str, words: list[dict[str, Any]]) -> list[tuple[int, int]] | None:
    """Each word's (start, end) character offset in ``text``, in order; None when a word is
    not found (a text the words were not cut from)."""
    out, pos = [], 0
    for w in words:
        at = text.find(w["word"], pos)
        if at < 0:
            return None
        out.append((at, at + len(w["word"])))
        pos = at + len(w["word"])
    return out


def trim_piece(piece: Piece, lo: float, hi: float, by: str = "middle") -> Piece:
    """``piece`` keeping the words whose middle (``by="start"``: start) lies in ``[lo, hi)``
    and the text from the first of them to the last (an untimed piece is kept whole)."""
    if piece.words is None:
        return piece
    words = piece.words
    at = ([(w["start"] + w["end"]) / 2 for w in words] if by == "middle"
          else [w["start"] for w in words])
    keep = [i for i, t in enumerate(at) if lo <= t < hi]
    if len(keep) == len(words):
        return piece
    offsets = word_offsets(piece.text, words)
    if not keep:
        text = ""
    elif offsets is None:
        text = join_words([words[i]["word"] for i in keep])
    else:
        text = piece.text[offsets[keep[0]][0]:offsets[keep[-1]][1]]
    return replace(piece, text=text, words=[words[i] for i in keep], model_segments=None,
                   start=max(piece.start, lo), end=min(piece.end, hi))


def segment_offsets(text: str, texts: list[str]) -> list[int | None]:
    """Character offset in ``text`` where each of the segment texts ``texts`` begins, in
    order (stripped); None for an empty one or one not found there."""
    out: list[int | None] = []
    pos = 0
    for piece in (t.strip() for t in texts):
        at = text.find(piece, pos) if piece else -1
        out.append(at if at >= 0 else None)
        if at >= 0:
            pos = at + len(piece)
    return out


def _model_breaks(text: str, segments: list[dict[str, Any]]) -> list[int]:
    """Character offsets in ``text`` where the model's segments after the first begin."""
    found = segment_offsets(text, [seg.get("text") or "" for seg in segments])
    return [at for k, at in enumerate(found) if k and at is not None]


def _share(words: list[dict[str, Any]], first: int, span: dict[str, Any]) -> None:
    """Words ``first`` and ``first + 1`` share ``span`` (one of theirs), in proportion to
    their characters."""
    a, b = words[first], words[first + 1]
    start, end = span["start"], span["end"]
    cut = round(start + (end - start) * len(a["word"]) / (len(a["word"]) + len(b["word"])), 3)
    a["start"], a["end"], b["start"], b["end"] = start, cut, cut, end


def _restore_strays(piece: Piece) -> Piece:
    """Whisper's segments whose first word the aligner put at the end of the previous
    utterance (touching its last word, ``STRAY_GAP_S`` before the segment's second word), or
    whose last word at the start of the next: that word shares its neighbour's span."""
    words = piece.words
    if not words or not piece.model_segments:
        return piece
    offsets = word_offsets(piece.text, words)
    if offsets is None:
        return piece
    breaks = _model_breaks(piece.text, piece.model_segments)
    runs: list[list[int]] = [[0]]
    for i in range(1, len(words)):
        if any(offsets[i - 1][1] <= b <= offsets[i][0] for b in breaks):
            runs.append([i])
        else:
            runs[-1].append(i)
    out = [dict(w) for w in words]
    for run in runs:
        if len(run) < 2:
            continue
        a, z = run[0], run[-1]
        if (a > 0 and out[a + 1]["start"] - out[a]["end"] >= STRAY_GAP_S
                and out[a]["start"] - out[a - 1]["end"] <= _TOUCH_S):
            _share(out, a, dict(out[a + 1]))
        if (z + 1 < len(out) and out[z]["start"] - out[z - 1]["end"] >= STRAY_GAP_S
                and out[z + 1]["start"] - out[z]["end"] <= _TOUCH_S):
            _share(out, z - 1, dict(out[z - 1]))
    return replace(piece, words=out)


def _split_long(words: list[dict[str, Any]], run: list[int]) -> list[list[int]]:
    """A run of word indices longer than MAX_SEGMENT_S, cut at its longest pause, repeatedly."""
    if len(run) < 2 or words[run[-1]]["end"] - words[run[0]]["start"] <= MAX_SEGMENT_S:
        return [run]
    gaps = [words[run[i]]["start"] - words[run[i - 1]]["end"] for i in range(1, len(run))]
    cut = 1 + max(range(len(gaps)), key=lambda i: gaps[i])
    return _split_long(words, run[:cut]) + _split_long(words, run[cut:])


def piece_segments(piece: Piece) -> list[dict[str, Any]]:
    """The piece's segments (module docstring), unclipped."""
    words = piece.words or []
    offsets = word_offsets(piece.text, words) if words else None
    if offsets is None:
        if piece.model_segments:
            return [dict(s) for s in piece.model_segments if (s.get("text") or "").strip()]
        text = piece.text.strip()
        return [{"start": piece.start, "end": piece.end, "text": text}] if text else []
    model = piece.model_segments is not None
    breaks = sorted(_model_breaks(piece.text, piece.model_segments or []))
    runs: list[list[int]] = [[0]]
    for i in range(1, len(words)):
        prev, word = words[i - 1], words[i]
        first = words[runs[-1][0]]
        cut = (any(offsets[i - 1][1] <= b <= offsets[i][0] for b in breaks)
               or word["start"] - prev["end"] >= SEGMENT_PAUSE_S
               or (not model and ends_sentence(prev["word"])
                   and prev["end"] - first["start"] >= MIN_SENTENCE_S))
        if cut:
            runs.append([i])
        else:
            runs[-1].append(i)
    runs = [part for run in runs for part in _split_long(words, run)]
    return [{"start": words[run[0]]["start"], "end": words[run[-1]]["end"],
             "text": piece.text[offsets[run[0]][0]:offsets[run[-1]][1]]} for run in runs]


def floor_word_lengths(words: list[dict[str, Any]], lo: float = 0.0,
                       hi: float = math.inf) -> list[dict[str, Any]]:
    """``words`` (in order, disjoint) with each one shorter than MIN_WORD_S widened into the
    pauses beside it, end first, never past a neighbour nor out of ``[lo, hi]``."""
    out = [dict(w) for w in words]
    for i, w in enumerate(out):
        short = MIN_WORD_S - (w["end"] - w["start"])
        if short <= 1e-9:
            continue
        after = out[i + 1]["start"] if i + 1 < len(out) else min(w["end"] + short, hi)
        w["end"] = round(min(w["end"] + short, max(after, w["end"])), 3)
        short = MIN_WORD_S - (w["end"] - w["start"])
        if short > 1e-9:
            before = out[i - 1]["end"] if i else max(w["start"] - short, lo)
            w["start"] = round(max(w["start"] - short, min(before, w["start"])), 3)
    return out


def _split_at(pieces: list[Piece], at: float, repair: Piece) -> list[Piece]:
    """Each piece but ``repair`` holding words that start both before and from ``at`` cut in
    two there."""
    out = []
    for p in pieces:
        starts = [w["start"] for w in p.words or []]
        if p is repair or not any(t < at for t in starts) or not any(
                t >= at for t in starts):
            out.append(p)
        else:
            out += [trim_piece(p, -math.inf, at, by="start"),
                    trim_piece(p, at, math.inf, by="start")]
    return out


def _interleave(pieces: list[Piece]) -> list[Piece]:
    """Pieces in time order, a piece holding words on both sides of a repair's start or end
    split there (by word start), so its words and the repair's come out in order. A repair
    goes before a piece whose first word starts with it: that word is one the aligner laid
    over the speech the decode skipped, and its sentence follows."""
    out = sorted(pieces, key=lambda p: p.start)
    for repair in [p for p in out if p.kind == "repair"]:
        out = _split_at(_split_at(out, repair.start, repair), repair.end, repair)

    def first(p: Piece) -> tuple[float, bool]:
        return (p.words[0]["start"] if p.words else p.start), p.kind != "repair"

    return sorted(out, key=first)


def _disjoint(words: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each word's end pulled back to the next word's start (a word the aligner stretched over
    speech a repair found words in); a word starting before the one ahead of it (laid over
    the repaired speech, which comes first) starts where that one ends."""
    out = [dict(w) for w in words]
    for a, b in zip(out, out[1:]):
        if b["start"] < a["start"]:
            b["start"] = a["end"]
            b["end"] = max(b["end"], b["start"])
        elif a["end"] > b["start"]:
            a["end"] = max(b["start"], a["start"])
    return out


def assemble(pieces: list[Piece], previous_end: float = 0.0,
             speech: list[tuple[float, float]] | None = None, settled_to: float = math.inf,
             before: dict[str, Any] | None = None, after: dict[str, Any] | None = None
             ) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(text, segments, words) of ``pieces`` (ordered by time, disjoint): segments strictly
    increasing from ``previous_end`` on (where an earlier group of the same recording ended);
    words None when no piece is timed. ``speech``: the coverage detector's spans, known up to
    ``settled_to``; word edges it contradicts are moved (:mod:`oasr.transcribe.speech_snap`),
    ``before`` / ``after`` the recording's words either side of these pieces (neighbours
    assembled apart)."""
    timed = any(p.words is not None for p in pieces)
    pieces = ([_restore_strays(p) for p in _interleave(pieces)] if timed
              else sorted(pieces, key=lambda p: p.start))
    words = None
    if timed and pieces:
        words = _disjoint([w for p in pieces for w in p.words or []])
        if speech:
            words = snap_to_speech(words, speech, until=settled_to, before=before, after=after)
        words = floor_word_lengths(words, min(p.start for p in pieces),
                                   max(p.end for p in pieces))
    if words is not None:  # the floored times back into the pieces' words, for their segments
        it = iter(words)
        pieces = [Piece(**{**p.__dict__, "words": [next(it) for _ in p.words or []]
                           if p.words is not None else None}) for p in pieces]
    segments: list[dict[str, Any]] = []
    end = previous_end
    for piece in pieces:
        for seg in piece_segments(piece):
            # Within the piece's audio (a model timestamp can run past it) and after the last.
            start = max(min(float(seg["start"]), piece.end), end)
            stop = seg["end"]
            stop = max(min(float(stop) if stop is not None else piece.end, piece.end), start)
            segments.append({"start": round(start, 3), "end": round(stop, 3),
                             "text": seg["text"]})
            end = stop
    for a, b in zip(segments, segments[1:]):  # an untimed segment's end: the next start
        a["end"] = min(a["end"], b["start"])
    if len(pieces) == 1:
        text = pieces[0].text
    else:
        text = join_words([s["text"] for s in segments]) if timed else join_words(
            [p.text for p in pieces])
    return text, segments, words
