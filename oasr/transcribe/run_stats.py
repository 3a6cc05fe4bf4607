"""A run's figures, as the summary prints them: counters only, so they do not grow with the
rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.io import OutputRow
from oasr.transcribe.running_wer import RunningWer

__all__ = ["RunStats"]


@dataclass
class RunStats:
    """A run's figures (rows, errors, audio and wall seconds, running WER, finish reasons,
    coverage warnings and repairs, kernel dispatch counts)."""

    rows: int = 0
    errors: int = 0
    skipped: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0
    wer: RunningWer = field(default_factory=RunningWer)
    # Rows by finish_reason (oasr.transcribe.rows.FINISH_REASONS).
    finish_reasons: dict[str, int] = field(default_factory=dict)
    error_examples: list[str] = field(default_factory=list)
    # Rows left with detected speech no word covers (each carries a warning), and stretches
    # of speech decoded again and kept (oasr.transcribe.repair).
    coverage_warnings: int = 0
    repairs: int = 0
    dispatch: dict[tuple[str, str], int] = field(default_factory=dict)  # oasr.ops counts

    def add(self, out: OutputRow, ref: str | None) -> None:
        self.rows += 1
        self.audio_s += out.duration or 0.0
        if out.error:
            self.errors += 1
            if len(self.error_examples) < 5:
                self.error_examples.append(f"{out.id}: {out.error}")
            return
        if out.finish_reason:
            self.finish_reasons[out.finish_reason] = (
                self.finish_reasons.get(out.finish_reason, 0) + 1)
        if ref is not None:
            self.wer.add(ref, out.text or "")

    @property
    def rtfx(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0
