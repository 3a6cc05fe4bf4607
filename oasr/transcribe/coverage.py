"""Speech the detector found against the words transcribed: a recording's coverage figure and
the stretches of speech no word covers.

A word covers the speech from ``tolerance_s`` before its start to ``tolerance_s`` after its
end, but never more than ``max_word_s`` of it: a word the aligner stretched over seconds of
speech the decoder skipped (a window whose last segment claims 15 s for five words) does not
hide the skip. An *uncovered stretch* is a run of detected speech no word covers, at least
``min_gap_s`` long (a breath, a click or a detector's overhang is not worth a decode).

``coverage`` = covered speech seconds / detected speech seconds (1.0 when the detector found no
speech: nothing was left out). It is measured only where words are timed.

A *lone stretch* (:func:`lone_stretches`) is a run of speech of at least ``lone_run_s`` whose only
word is a short one (at most ``lone_letters`` letters): the aligner lays such a word over speech
the decode skipped. It covers the run for the figure, but the run is decoded again (the repair
dropped when it only re-reads the words around it, :mod:`oasr.transcribe.repair`).

Which detector measures it (:func:`build_coverage_detector`): the run's ``--vad`` detector when
one is named (its own unpadded speech); otherwise ``--coverage-vad``: ``auto`` is Silero when
``silero-vad`` is installed and the energy pauses of :mod:`oasr.engine.decode.pauses` (the same
rule the word timings are snapped with) when it is not; ``none`` measures and repairs nothing.
Silero is the default because it tells speech from steady noise and music, which an energy rule
takes for sound; a stretch of such sound "uncovered" would be decoded again for nothing.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from oasr.transcribe.options import COVERAGE_VADS

__all__ = ["COVERAGE_VADS", "CoverageCheck", "CoverageRules", "EnergySpeech", "SegmenterSpeech",
           "Span", "build_coverage_detector", "coverage_figure", "coverage_ratio",
           "covered_seconds", "describe_stretches", "lone_stretches", "merge_spans",
           "plain_word", "uncovered"]

Span = tuple[float, float]
# Speech shorter than this is not counted (a click; the presegmenter's own minimum).
MIN_SPEECH_S = 0.25
# Pauses shorter than this do not split the energy rule's speech (the presegmenter's).
MIN_SILENCE_S = 0.16


@dataclass(frozen=True)
class CoverageRules:
    """How words cover speech (module docstring). Chosen on the tuning speakers
    (docs/decoding.md, "Long recordings")."""

    tolerance_s: float = 0.3
    min_gap_s: float = 0.5
    max_word_s: float = 1.5
    # A lone short word in a long run of speech (:func:`lone_stretches`): at most this many
    # letters, alone in a run of at least ``lone_run_s``; its repair is dropped when it only
    # re-reads words within ``context_words`` of the stretch (either side).
    lone_letters: int = 3
    lone_run_s: float = 1.0
    context_words: int = 8

    def __post_init__(self) -> None:
        if self.tolerance_s < 0 or self.min_gap_s <= 0 or self.max_word_s <= 0:
            raise ValueError(f"coverage rules need tolerance_s >= 0, min_gap_s > 0 and "
                             f"max_word_s > 0, got {self}")


def _get(word: Any, name: str) -> float:
    return float(word[name] if isinstance(word, Mapping) else getattr(word, name))


def merge_spans(spans: Iterable[Span], join: float = 0.0) -> list[Span]:
    """``spans`` sorted and merged where they overlap or lie at most ``join`` apart; empty
    spans dropped."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1] + join:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def coverage_ratio(covered: float, total: float) -> float:
    """Covered / detected speech seconds, rounded to 1e-4 (1.0 without detected speech)."""
    return round(covered / total, 4) if total > 0 else 1.0


def describe_stretches(spans: Sequence[Span], shown: int = 3) -> tuple[float, str]:
    """(their seconds, where: "10.0-11.2 s, 40.3-41.2 s and 2 more") of stretches of speech
    left without words, for a warning."""
    where = ", ".join(f"{a:.1f}-{b:.1f} s" for a, b in spans[:shown])
    more = f" and {len(spans) - shown} more" if len(spans) > shown else ""
    return sum(b - a for a, b in spans), where + more


def word_cover(words: Iterable[Any], rules: CoverageRules) -> list[Span]:
    """The merged spans the words cover."""
    spans = []
    for w in words:
        start, end = _get(w, "start"), _get(w, "end")
        end = min(end, start + rules.max_word_s)
        spans.append((start - rules.tolerance_s, end + rules.tolerance_s))
    return merge_spans(spans)


def _subtract(speech: Sequence[Span], cover: Sequence[Span]) -> list[Span]:
    out = []
    for s, e in speech:
        pos = s
        for a, b in cover:
            if b <= pos or a >= e:
                continue
            if a > pos:
                out.append((pos, a))
            pos = max(pos, b)
            if pos >= e:
                break
        if pos < e:
            out.append((pos, e))
    return out


def uncovered(speech: Sequence[Span], words: Iterable[Any],
              rules: CoverageRules) -> list[Span]:
    """The stretches of ``speech`` no word covers, each at least ``rules.min_gap_s``."""
    gaps = _subtract(merge_spans(speech), word_cover(words, rules))
    return [(a, b) for a, b in gaps if b - a >= rules.min_gap_s - 1e-9]


def plain_word(word: str) -> str:
    """A word as the repeat check compares it: its letters and digits, lower-cased."""
    return "".join(ch for ch in word.lower() if ch.isalnum())


def lone_stretches(speech: Sequence[Span], words: Sequence[Any],
                   rules: CoverageRules) -> list[tuple[Span, int]]:
    """Runs of speech a single short word claims: a merged run of at least
    ``rules.lone_run_s`` holding the middle of exactly one word, of at most
    ``rules.lone_letters`` letters. The aligner lays such a word ("the", "I") over speech the
    decode skipped, and its cover hides the skip. Returns (the part of the run no other word
    covers, at least ``min_gap_s``; the lone word's index in ``words``) for each."""
    middles = [(_get(w, "start") + _get(w, "end")) / 2 for w in words]
    out = []
    for a, b in merge_spans(speech):
        if b - a < rules.lone_run_s - 1e-9:
            continue
        inside = [i for i, m in enumerate(middles) if a <= m < b]
        if len(inside) != 1:
            continue
        i = inside[0]
        w = words[i]
        text = w["word"] if isinstance(w, Mapping) else w.word
        if len(plain_word(str(text))) > rules.lone_letters:
            continue
        others = [x for j, x in enumerate(words) if j != i]
        out += [(gap, i) for gap in uncovered([(a, b)], others, rules)]
    return out


def covered_seconds(speech: Sequence[Span], words: Iterable[Any],
                    rules: CoverageRules) -> tuple[float, float]:
    """(speech seconds covered by words, speech seconds detected)."""
    merged = merge_spans(speech)
    total = sum(e - s for s, e in merged)
    left = sum(e - s for s, e in _subtract(merged, word_cover(words, rules)))
    return total - left, total


def coverage_figure(speech: Sequence[Span], words: Iterable[Any],
                    rules: CoverageRules) -> float:
    """Covered / detected speech seconds, rounded to 1e-4 (1.0 without detected speech)."""
    return coverage_ratio(*covered_seconds(speech, words, rules))


# -- detectors ----------------------------------------------------------------------------------
class SegmenterSpeech:
    """Speech spans from a presegmenting detector (``vad_segments.RecordingSegmenter``),
    unpadded and unsplit."""

    def __init__(self, segmenter: Any, name: str) -> None:
        self.segmenter = segmenter
        self.name = name

    @property
    def device(self) -> str:
        """Where the detector computes ("" when its detector does not say)."""
        return str(getattr(self.segmenter.detector, "device", ""))

    def __call__(self, audio: np.ndarray, sample_rate: int) -> list[Span]:
        return self.segmenter.speech(audio, sample_rate)

    def batch(self, audios: list[np.ndarray], sample_rate: int) -> list[list[Span]]:
        """Several recordings' speech through one padded detector call."""
        return [r.speech for r in self.segmenter.batch(audios, sample_rate, math.inf)]


class EnergySpeech:
    """Speech spans from the word-timing pause rule (:func:`pauses.quiet_frames`): runs of
    sound at least ``MIN_SPEECH_S``, pauses under ``MIN_SILENCE_S`` bridged."""

    name = "energy"
    device = "cpu"  # numpy

    def __call__(self, audio: np.ndarray, sample_rate: int) -> list[Span]:
        from oasr.engine.decode.pauses import HOP_S, quiet_frames

        quiet = quiet_frames(audio, sample_rate)
        edges = np.diff(np.concatenate(([0], (~quiet).astype(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        spans: list[list[float]] = []
        for a, b in zip(starts * HOP_S, ends * HOP_S):
            if spans and a - spans[-1][1] < MIN_SILENCE_S:
                spans[-1][1] = float(b)
            else:
                spans.append([float(a), float(b)])
        return [(a, b) for a, b in spans if b - a >= MIN_SPEECH_S - 1e-9]


def silero_installed() -> bool:
    return importlib.util.find_spec("silero_vad") is not None


def build_coverage_detector(name: str, vad_segmenter: Any = None, vad_name: str = "none",
                            device: str = "cpu") -> SegmenterSpeech | EnergySpeech | None:
    """The detector coverage is measured with (module docstring); None for ``none``.
    ``vad_segmenter``: the run's ``--vad`` segmenter, used whatever ``name`` says but ``none``.
    Raises ValueError for an unknown name or ``silero`` without its package."""
    if name not in COVERAGE_VADS:
        raise ValueError(f"coverage_vad {name!r}: choose one of {', '.join(COVERAGE_VADS)}")
    if name == "none":
        return None
    if vad_segmenter is not None:
        return SegmenterSpeech(vad_segmenter, vad_name)
    if name == "energy" or (name == "auto" and not silero_installed()):
        return EnergySpeech()
    if not silero_installed():
        raise ValueError("coverage_vad silero: silero-vad is not installed; pip install "
                         "'oasr[vad]', or pass --coverage-vad energy")
    from oasr.transcribe.recording_segmenter import build_recording_segmenter

    return SegmenterSpeech(build_recording_segmenter("silero", device=device), "silero")


@dataclass(frozen=True)
class CoverageCheck:
    """What a runner measures coverage with: the detector and the rules; ``repair``: whether
    uncovered stretches are decoded again (off: measured and reported only)."""

    detector: Any  # SegmenterSpeech | EnergySpeech
    rules: CoverageRules = CoverageRules()
    repair: bool = True

    @property
    def name(self) -> str:
        return self.detector.name

    def with_rules(self, **changes: float) -> CoverageCheck:
        return replace(self, rules=replace(self.rules, **changes))
