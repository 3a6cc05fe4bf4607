"""One recording's coverage while it is decoded: the speech detected so far, the stretches of it
no word covered, and their repair decodes.

A stretch of speech (:mod:`oasr.transcribe.coverage`) left uncovered by the decode that should
have covered it is decoded again on its own: the stretch's audio padded with up to ``PAD_S`` of
the pauses around it (never reaching a word already transcribed), split into pieces no longer
than the model's window, without the previous-text prompt and without timestamps, at each of
``REPAIR_TEMPERATURES`` in turn (a temperature above 0 is sampled, seeded per stretch and
attempt). An attempt is kept unless Whisper's no-speech guard calls it silent; one whose text
fails the fallback thresholds (compression ratio, mean log-probability) goes on to the next
temperature, the last one's standing, as in Whisper's own fallback. Of what it decodes, only
the words inside the stretch (within the coverage tolerance) are kept. A stretch that still
has no word is *unrepaired*: the row's ``coverage`` counts it and the row carries a warning.

The stretch a lone short word claims (``coverage.lone_stretches``) is decoded again the same
way; its repair is dropped when every word it reads is among the words within
``context_words`` of the stretch (it re-reads them), and it does not repeat the lone word
where it reads it first or last. Without a kept repair the lone word stands and covers it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from oasr.engine.request import DecodingOptions, RequestOutput
from oasr.transcribe.coverage import (
    CoverageCheck,
    Span,
    coverage_figure,
    describe_stretches,
    lone_stretches,
    merge_spans,
    plain_word,
    uncovered,
)
from oasr.transcribe.fallback import TemperatureFallback
from oasr.transcribe.generation_limits import generation_cap
from oasr.transcribe.segments import Piece, trim_piece
from oasr.transcribe.speech_ahead import SpeechAhead, SpeechBatched

__all__ = ["PAD_S", "REPAIR_TEMPERATURES", "RepairJob", "RowCoverage"]

REPAIR_TEMPERATURES = (0.0, 0.4)
PAD_S = 0.25
# The guard's thresholds where the run sets none (decode again at most; keep no silence).
_GUARD = TemperatureFallback()


@dataclass
class RepairJob:
    """One stretch's repair decode in flight: ``span`` the uncovered stretch, ``audio_start``
    where its audio begins (both on the recording's clock), ``group`` the piece of the run it
    belongs to (a window index)."""

    span: Span
    audio_start: float
    audio: np.ndarray
    group: int = 0
    attempt: int = 0
    key: int = 0
    # A stretch a lone short word claimed (``coverage.lone_stretches``): the words around it
    # (plain), which a repair that only re-reads them does not add again, and the lone word.
    context: frozenset[str] | None = None
    lone_word: str = ""


@dataclass
class RowCoverage:
    """A recording's speech and its repairs. All times on the recording's clock (the row's
    ``offset`` included)."""

    check: CoverageCheck
    sample_rate: int
    window_s: float
    speech: list[Span] = field(default_factory=list)
    settled_to: float = 0.0  # the end of the part of the recording whose speech is known
    unrepaired: list[Span] = field(default_factory=list)
    repaired: int = 0
    pending: dict[int, RepairJob] = field(default_factory=dict)
    warned: bool = False  # the row carries the warning of speech left without words
    # Runs the detector over the blocks handed over (its own thread, or batched on the
    # caller's: oasr.transcribe.speech_ahead); None: each block detected as it is handed over.
    ahead: SpeechAhead | SpeechBatched | None = None
    _next_key: int = 0
    # The recording's speech is detected in blocks of one window on a fixed grid (not on the
    # windows, whose starts are known only once the previous one is back), so the blocks of
    # the next windows can be detected while the engine decodes this one. Block index -> its
    # speech (spans in the block), done or in flight on the detector's thread.
    _blocks: dict[int, Future] = field(default_factory=dict)
    _next_block: int = 0
    _end_block: int | None = None  # the first block past the recording's end, once read

    @property
    def block(self) -> int:
        """Samples per detector block: the model's window."""
        return max(1, int(round(self.window_s * self.sample_rate)))

    def detect_ahead(self, upto: int, read: Callable[[int, int], np.ndarray]) -> None:
        """Hand the detector every block of the recording that begins before sample ``upto``
        and is not yet handed over (without a runner: detected now); ``read(start,
        n)`` returns samples ``[start, start + n)`` (fewer at the end). Must run before the
        reader forgets those samples."""
        while self._end_block is None and self._next_block * self.block < upto:
            audio = read(self._next_block * self.block, self.block)
            if not len(audio):
                self._end_block = self._next_block
                return
            if self.ahead is not None:
                future = self.ahead.submit(audio)
            else:
                future = Future()
                future.set_result(self.check.detector(audio, self.sample_rate))
            self._blocks[self._next_block] = future
            self._next_block += 1
            if len(audio) < self.block:
                self._end_block = self._next_block

    def detect(self, seek: int, length: int, offset: float = 0.0) -> list[Span]:
        """The speech in samples ``[seek, seek + length)`` on the recording's clock (``offset``:
        the row's start in it), from the blocks handed over by :meth:`detect_ahead`; spans
        that meet at a block's edge are one. Blocks before ``seek`` are forgotten.

        Raises:
            RuntimeError: a block inside the recording was never handed over (the window's
                speech would silently read as none).
        """
        first, last = seek // self.block, (seek + length - 1) // self.block
        for stale in [b for b in self._blocks if b < first]:
            self._blocks.pop(stale).cancel()
        if self._end_block is not None:  # nothing past the recording's end
            last = min(last, self._end_block - 1)
        missing = [b for b in range(first, last + 1) if b not in self._blocks]
        if missing:
            raise RuntimeError(f"coverage blocks {missing} were never handed to the detector: "
                               f"detect_ahead must cover a window before it is read")
        blocks = [(b * self.block / self.sample_rate, self._blocks[b].result())
                  for b in range(first, last + 1)]
        spans = merge_spans(((base + a, base + z) for base, found in blocks for a, z in found),
                            join=1e-6)
        lo, hi = seek / self.sample_rate, (seek + length) / self.sample_rate
        return [(offset + max(a, lo), offset + min(z, hi)) for a, z in spans if z > lo and a < hi]

    def settle(self, spans: list[Span], lo: float, hi: float) -> list[Span]:
        """``spans`` clipped to ``[lo, hi)``, the part of the recording now settled, and kept."""
        kept = [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]
        self.speech += kept
        self.settled_to = max(self.settled_to, hi)
        return kept

    def gaps(self, speech: list[Span], words: list[dict[str, Any]]) -> list[Span]:
        return uncovered(speech, words, self.check.rules)

    def lone_gaps(self, speech: list[Span], words: list[dict[str, Any]],
                  gaps: list[Span]) -> list[tuple[Span, dict[str, Any]]]:
        """(stretch, the lone word) for each stretch a lone short word claims in ``speech``
        (``coverage.lone_stretches``), but for runs that meet an uncovered stretch of ``gaps``
        (repaired as such)."""
        return [(g, words[i]) for g, i in lone_stretches(speech, words, self.check.rules)
                if not any(a < g[1] and g[0] < b for a, b in gaps)]

    def all_jobs(self, speech: list[Span], words: list[dict[str, Any]], audio: np.ndarray,
                 audio_start: float, group: int, gaps: list[Span] | None = None
                 ) -> list[RepairJob]:
        """The repairs of ``speech`` against ``words``: of its uncovered stretches (``gaps``
        when the caller has them) and of the stretches lone short words claim."""
        if gaps is None:
            gaps = self.gaps(speech, words)
        out = [job for gap in gaps for job in self.jobs(gap, words, audio, audio_start, group)]
        if self.check.repair:  # unrepaired, a lone word's stretch is covered by the word
            for gap, word in self.lone_gaps(speech, words, gaps):
                out += self.jobs(gap, words, audio, audio_start, group, lone=word)
        return out

    def _context(self, stretch: Span, words: list[dict[str, Any]]) -> frozenset[str]:
        """The plain words inside ``stretch`` and ``context_words`` either side of it."""
        n = self.check.rules.context_words
        order = sorted(words, key=lambda w: w["start"])
        first = next((i for i, w in enumerate(order) if w["end"] > stretch[0]), len(order))
        last = next((i for i in range(len(order) - 1, -1, -1)
                     if order[i]["start"] < stretch[1]), -1)
        near = order[max(0, first - n):max(first, last + 1) + n]
        return frozenset(plain_word(w["word"]) for w in near)

    def jobs(self, stretch: Span, words: list[dict[str, Any]], audio: np.ndarray,
             audio_start: float, group: int, lone: dict[str, Any] | None = None
             ) -> list[RepairJob]:
        """Repair decodes of ``stretch`` cut from ``audio`` (beginning at ``audio_start``):
        padded into the pauses around it short of the nearest words, at most a window each.
        ``lone``: the lone short word claiming the stretch (its repair checked for repeats;
        no neighbour to pad up to)."""
        context = None if lone is None else self._context(stretch, words)
        if lone is not None:
            words = [w for w in words if w is not lone]
        before = max((w["end"] for w in words if w["end"] <= stretch[0]), default=audio_start)
        after = min((w["start"] for w in words if w["start"] >= stretch[1]),
                    default=audio_start + len(audio) / self.sample_rate)
        lo = max(stretch[0] - PAD_S, before, audio_start)
        hi = min(stretch[1] + PAD_S, after, audio_start + len(audio) / self.sample_rate)
        jobs = []
        step = self.window_s
        t = lo
        while t < hi - 1e-6:
            end = min(t + step, hi)
            a = int(round((t - audio_start) * self.sample_rate))
            b = int(round((end - audio_start) * self.sample_rate))
            piece = (max(stretch[0], t), min(stretch[1], end))
            jobs.append(RepairJob(piece, t, audio[a:b].copy(), group, key=self._next_key,
                                  context=context,
                                  lone_word="" if lone is None else plain_word(lone["word"])))
            self._next_key += 1
            t = end
        if not self.check.repair:
            self.unrepaired += [j.span for j in jobs]
            return []
        for job in jobs:
            self.pending[job.key] = job
        return jobs

    def decoding(self, base: DecodingOptions, job: RepairJob, row_id: str,
                 seed: int) -> DecodingOptions:
        """The repair's request options: no prompt, no timestamps, the attempt's temperature."""
        temperature = REPAIR_TEMPERATURES[job.attempt]
        draw = (zlib.crc32(f"{seed}\x1f{row_id}\x1frepair\x1f{job.span[0]:.3f}\x1f"
                           f"{job.attempt}".encode()) & 0x7FFFFFFF)
        return replace(base, prompt=None, timestamps=False, temperature=temperature,
                       seed=draw if temperature > 0 else None,
                       max_new_tokens=generation_cap(len(job.audio) / self.sample_rate))

    def outcome(self, job: RepairJob, out: RequestOutput,
                fallback: TemperatureFallback | None) -> Piece | bool:
        """A kept repair's piece; True: decode again at the next temperature; False: nothing
        kept (the stretch stays unrepaired, or a lone word's stays covered by the word)."""
        guard = fallback or _GUARD
        last = job.attempt + 1 >= len(REPAIR_TEMPERATURES)
        words = self._inside(job, out)
        if guard.silent(out) or not words:
            return self._retry(job, last)
        if guard.failed(out) is not None and not last:
            return self._retry(job, last)
        self.pending.pop(job.key, None)
        if job.context is not None and all(plain_word(w["word"]) in job.context
                                           for w in words):
            return False  # it re-reads the words around the lone word: they are there
        self.repaired += 1
        tol = self.check.rules.tolerance_s
        end = job.audio_start + len(job.audio) / self.sample_rate
        whole = Piece(job.audio_start, end, out.text, self._words(job, out),
                      temperature=REPAIR_TEMPERATURES[job.attempt], source=out, kind="repair")
        piece = trim_piece(whole, job.span[0] - tol, job.span[1] + tol)
        return self._without_lone_word(job, piece)

    @staticmethod
    def _without_lone_word(job: RepairJob, piece: Piece) -> Piece:
        """A lone word's repair without the lone word itself where it reads it first or
        last: the window's copy stays."""
        words = piece.words or []
        if not job.lone_word or len(words) < 2:
            return piece
        if plain_word(words[0]["word"]) == job.lone_word:
            return trim_piece(piece, words[1]["start"], piece.end + 1.0, by="start")
        if plain_word(words[-1]["word"]) == job.lone_word:
            return trim_piece(piece, piece.start - 1.0, words[-1]["start"], by="start")
        return piece

    def _retry(self, job: RepairJob, last: bool) -> bool:
        if last:
            self.pending.pop(job.key, None)
            if job.context is None:  # a lone word's stretch stays covered by the word
                self.unrepaired.append(job.span)
            return False
        job.attempt += 1
        return True

    def _words(self, job: RepairJob, out: RequestOutput) -> list[dict[str, Any]]:
        end = job.audio_start + len(job.audio) / self.sample_rate
        return [{"word": w.word, "start": round(min(job.audio_start + w.start, end), 3),
                 "end": round(min(job.audio_start + w.end, end), 3), "confidence": w.confidence}
                for w in out.words or []]

    def _inside(self, job: RepairJob, out: RequestOutput) -> list[dict[str, Any]]:
        """The decoded words inside the stretch (their middle within the tolerance)."""
        tol = self.check.rules.tolerance_s
        lo, hi = job.span[0] - tol, job.span[1] + tol
        return [w for w in self._words(job, out) if lo <= (w["start"] + w["end"]) / 2 < hi]

    def figure(self, words: list[dict[str, Any]]) -> float:
        return coverage_figure(self.speech, words, self.check.rules)

    def warning(self, words: list[dict[str, Any]]) -> str | None:
        """The row's warning when detected speech stayed without words after the repairs."""
        left = uncovered(self.speech, words, self.check.rules)
        if not left:
            return None
        self.warned = True
        seconds, where = describe_stretches(left)
        return (f"{seconds:.1f} s of speech ({self.check.name} detector) has no transcribed "
                f"words after decoding it again: {where} (coverage "
                f"{self.figure(words):.1%})")
