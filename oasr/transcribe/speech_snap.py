"""Word edges moved out of the pauses the coverage detector found.

The aligner times words from the decoder's attention and the energy pauses of
:mod:`oasr.engine.decode.pauses`; on long recordings it still spreads an utterance's first or
last word over a neighbouring pause, or leaves a sentence's first word at the end of the
previous utterance (Whisper closed a segment after it). The coverage detector (Silero by default)
tells speech from a pause independently of the aligner, but its own edges are loose by a tenth of
a second or more (late onsets on quiet speakers), so only a word it contradicts by a wide margin
is moved:

- a word whose start lies in a detected pause at least ``min_move_s`` before the speech that
  follows it (inside the word) starts where that speech starts; likewise a word whose end lies
  ``min_move_s`` into the pause after its speech ends where the speech ends;
- a word lying wholly in a pause, after punctuation or capitalised (it opens the next
  sentence), with speech beginning within ``stray_reach_s`` after its end and ``min_move_s``
  or more after its start, that the next word reaches into, moves to the start of that speech;
- a *lone* word, capitalised after a word ending a sentence, itself without punctuation, the
  last before a pause of at least ``lone_pause_s`` after which the next word begins, moves
  across the pause to the start of the speech after it.

A moved word keeps its length where the next word leaves room (otherwise half the way to the
next word's end, whose start follows it). Words stay in order and disjoint. Only words within
the settled part of the recording (``until``) are looked at: the speech after it is not known yet.
The constants were chosen on the tuning half of the shared speakers (docs/decoding.md).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from oasr.transcribe.coverage import merge_spans

__all__ = ["SpeechSnapRules", "snap_to_speech"]

_SENTENCE_END = (".", "?", "!", "…", "。", "？", "！")
_PUNCTUATION = _SENTENCE_END + (",", ";", ":", "，", "、")


@dataclass(frozen=True)
class SpeechSnapRules:
    """How far the detector must contradict a word before it moves (module docstring)."""

    min_move_s: float = 0.7
    stray_reach_s: float = 2.0
    lone_pause_s: float = 0.3
    # Detected spans closer than this are one stretch of speech (a window seam in the detector).
    join_s: float = 0.05


DEFAULT_RULES = SpeechSnapRules()


class _Speech:
    def __init__(self, spans: list[tuple[float, float]], join: float) -> None:
        self.spans = merge_spans(spans, join)
        self.starts = [a for a, _ in self.spans]

    def at(self, t: float) -> int | None:
        """The span holding time ``t``, or None (a pause)."""
        i = bisect.bisect_right(self.starts, t) - 1
        return i if i >= 0 and t < self.spans[i][1] else None

    def next_after(self, t: float) -> int | None:
        i = bisect.bisect_right(self.starts, t)
        return i if i < len(self.spans) else None

    def last_before(self, t: float) -> int | None:
        i = bisect.bisect_right(self.starts, t) - 1
        return i if i >= 0 else None


def _text(word: dict[str, Any]) -> str:
    return str(word["word"]).strip()


def _opens_sentence(prev: dict[str, Any] | None, word: dict[str, Any]) -> bool:
    """Capitalised, or after punctuation: the word opens a sentence or a clause."""
    return prev is None or _text(prev).endswith(_PUNCTUATION) or _text(word)[:1].isupper()


def _move_to(words: list[dict[str, Any]], k: int, start: float) -> tuple[float, float]:
    """Word ``k`` moved to begin at ``start``: its length where word ``k+1`` leaves room, at
    most half the way to that word's end; word ``k+1`` then starts at its end."""
    w, nxt = words[k], words[k + 1]
    end = max(start, min(start + (w["end"] - w["start"]), (start + nxt["end"]) / 2))
    if nxt["start"] < end:
        nxt["start"] = round(end, 3)
    return start, end


def snap_to_speech(words: list[dict[str, Any]], speech: list[tuple[float, float]],
                   until: float = float("inf"), rules: SpeechSnapRules = DEFAULT_RULES,
                   before: dict[str, Any] | None = None,
                   after: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``words`` (dicts word/start/end..., in order, disjoint) with their edges moved out of the
    pauses between the ``speech`` spans (module docstring); new dicts, same order and count.
    ``before`` / ``after``: the words just before and after them, where those are assembled
    apart (a recording's previous and next window): read as neighbours, never changed."""
    out = [dict(w) for w in words]
    if not out or not speech:
        return out
    sp = _Speech(list(speech), rules.join_s)
    move = rules.min_move_s
    context = ([dict(before)] if before is not None else []) + out + (
        [dict(after)] if after is not None else [])
    first_k = 1 if before is not None else 0
    for k in range(first_k, first_k + len(out)):
        w = context[k]
        start, end = w["start"], w["end"]
        if end > until:
            break
        prev = context[k - 1] if k else None
        nxt = context[k + 1] if k + 1 < len(context) else None
        first, last = sp.at(start), sp.at(end - 1e-6)
        if first is None:
            inside = sp.next_after(start)
            if inside is not None and sp.spans[inside][0] < end:  # speech inside the word
                if sp.spans[inside][0] - start >= move:
                    start = sp.spans[inside][0]
            elif (last is None and inside is not None and nxt is not None
                  and sp.spans[inside][0] - end <= rules.stray_reach_s
                  and sp.spans[inside][0] - start >= move
                  and nxt["end"] > sp.spans[inside][0]
                  and _opens_sentence(prev, w)):
                start, end = _move_to(context, k, sp.spans[inside][0])
        if last is None and end == w["end"]:
            ended = sp.last_before(end)
            if ended is not None and sp.spans[ended][1] > start \
                    and end - sp.spans[ended][1] >= move:
                end = sp.spans[ended][1]
        if (first is not None and nxt is not None and prev is not None
                and start == w["start"] and _text(prev).endswith(_SENTENCE_END)
                and _text(w)[:1].isupper() and not _text(w).endswith(_PUNCTUATION)):
            later = sp.next_after(start)
            if (later is not None and later > first
                    and sp.spans[later][0] - sp.spans[first][1] >= rules.lone_pause_s
                    and sp.spans[later][0] - rules.lone_pause_s <= nxt["start"]
                    < sp.spans[later][1] and sp.spans[later][0] < until):
                start, end = _move_to(context, k, sp.spans[later][0])
        if prev is not None and start < prev["end"]:
            start = prev["end"]
        w["start"], w["end"] = round(start, 3), round(max(end, start), 3)
    return out
