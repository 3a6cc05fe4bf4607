"""The WER of a run, accumulated row by row: a run of a million rows keeps two counters, not
every reference and hypothesis, and the figure equals :func:`oasr.metrics.wer.score` over them
(errors summed over rows / reference words summed over rows)."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.metrics.wer import word_errors

__all__ = ["RunningWer"]


@dataclass
class RunningWer:
    normalizer: str = "whisper"
    errors: int = 0
    ref_words: int = 0
    rows: int = 0

    def add(self, ref: str, hyp: str) -> None:
        errors, ref_words = word_errors(ref, hyp, normalizer=self.normalizer)
        self.errors += errors
        self.ref_words += ref_words
        self.rows += 1

    @property
    def wer(self) -> float | None:
        """errors / reference words; None before a reference with a word was seen."""
        return self.errors / self.ref_words if self.ref_words else None
