"""Word-timing accuracy at utterance boundaries, against reference segments with true times.

A recording made of known utterances (``[{"id", "start", "end", "text"}]``) is transcribed with
word timings; each utterance's first and last reference word are found among the hypothesis
words by a word alignment (jiwer, over normalized words, substitutions counting as matches),
and the matched words' start and end are compared with the utterance's true start and end.
An utterance none of whose words were matched counts as a miss (outside every tolerance).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oasr.metrics.wer import get_normalizer


@dataclass(frozen=True)
class BoundaryError:
    id: str
    true_start: float
    true_end: float
    start: float | None  # the first matched word's start; None when nothing matched
    end: float | None
    first_word: str | None = None  # the hypothesis words those times are from
    last_word: str | None = None

    @property
    def start_error(self) -> float:
        return float("inf") if self.start is None else abs(self.start - self.true_start)

    @property
    def end_error(self) -> float:
        return float("inf") if self.end is None else abs(self.end - self.true_end)


@dataclass(frozen=True)
class TimingReport:
    utterances: list[BoundaryError]

    def within(self, tolerance: float) -> float:
        """Fraction of utterances whose start AND end are within ``tolerance`` seconds."""
        ok = sum(u.start_error <= tolerance and u.end_error <= tolerance
                 for u in self.utterances)
        return ok / len(self.utterances) if self.utterances else 0.0

    def fraction(self, which: str, tolerance: float) -> float:
        errs = [getattr(u, f"{which}_error") for u in self.utterances]
        return sum(e <= tolerance for e in errs) / len(errs) if errs else 0.0

    def median(self, which: str) -> float:
        return statistics.median(getattr(u, f"{which}_error") for u in self.utterances)

    @property
    def missed(self) -> int:
        return sum(u.start is None for u in self.utterances)

    def summary(self, tolerance: float = 0.3) -> dict[str, Any]:
        return {
            "utterances": len(self.utterances), "missed": self.missed, "tolerance_s": tolerance,
            "start_within": self.fraction("start", tolerance),
            "end_within": self.fraction("end", tolerance),
            "both_within": self.within(tolerance),
            "median_start_error_s": self.median("start"),
            "median_end_error_s": self.median("end"),
        }


def _word(w: Any) -> tuple[str, float, float]:
    if isinstance(w, Mapping):
        return w["word"], float(w["start"]), float(w["end"])
    return w.word, float(w.start), float(w.end)


def boundary_errors(words: Sequence[Any], segments: Sequence[Mapping[str, Any]],
                    normalizer: str = "whisper") -> TimingReport:
    """``words``: hypothesis words in order (dicts or ``WordTiming``), on the recording's clock.
    ``segments``: the reference utterances in order, each ``id``, ``start``, ``end``, ``text``."""
    import jiwer

    norm = get_normalizer(normalizer)
    ref: list[str] = []
    owner: list[int] = []  # reference word -> utterance
    for u, seg in enumerate(segments):
        toks = norm(seg["text"]).split()
        ref += toks
        owner += [u] * len(toks)
    hyp: list[str] = []
    source: list[int] = []  # normalized hypothesis token -> hypothesis word
    timed = [_word(w) for w in words]
    for i, (text, _, _) in enumerate(timed):
        toks = norm(text).split()
        hyp += toks
        source += [i] * len(toks)

    matched: dict[int, int] = {}  # reference token -> hypothesis token
    if ref and hyp:
        out = jiwer.process_words(" ".join(ref), " ".join(hyp))
        for chunk in out.alignments[0]:
            if chunk.type in ("equal", "substitute"):
                for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                    matched[chunk.ref_start_idx + k] = chunk.hyp_start_idx + k

    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for r, h in sorted(matched.items()):
        u = owner[r]
        first.setdefault(u, source[h])
        last[u] = source[h]
    result = []
    for u, seg in enumerate(segments):
        start = timed[first[u]][1] if u in first else None
        end = timed[last[u]][2] if u in last else None
        result.append(BoundaryError(str(seg["id"]), float(seg["start"]), float(seg["end"]),
                                    start, end, timed[first[u]][0] if u in first else None,
                                    timed[last[u]][0] if u in last else None))
    return TimingReport(result)
