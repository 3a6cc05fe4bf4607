"""The progress bar and the end-of-run summary of ``oasr transcribe``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


class ProgressView:
    """Rows, audio hours, RTFx and ETA: updated as rows finish and, within a long recording,
    as each window settles (the bar by the window's share of the recording's duration)."""

    def __init__(self, console: Console, total: int | None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]transcribe"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[audio]}"), TextColumn("RTFx {task.fields[rtfx]}"),
            TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(),
            TimeRemainingColumn(), console=console, disable=not enabled,
        )
        self.task = self.progress.add_task("rows", total=total, audio="0.00 h", rtfx="-",
                                           errors=0)
        self._start = time.perf_counter()
        self._fractions: dict[str, float] = {}  # row id -> share of the bar advanced so far
        self._seconds: dict[str, float] = {}  # row id -> seconds settled, row not yet finished
        self._inflight_s = 0.0
        self._done_audio_s = 0.0

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def window(self, row_id: str, seconds: float, duration: float | None) -> None:
        """A window of a long recording settled: the bar moves by its share of the recording
        (when the header gave a duration) and the audio figure by its seconds."""
        self._inflight_s += seconds
        fraction = 0.0
        if duration:
            done = self._fractions.get(row_id, 0.0)
            fraction = min(seconds / duration, 0.99 - done) if done < 0.99 else 0.0
            self._fractions[row_id] = done + fraction
        self._seconds[row_id] = self._seconds.get(row_id, 0.0) + seconds
        elapsed = time.perf_counter() - self._start
        audio = self._done_audio_s + self._inflight_s
        self.progress.update(self.task, advance=fraction, audio=f"{audio / 3600:.2f} h",
                             rtfx=f"{audio / elapsed:.1f}" if elapsed > 0 else "-")

    def update(self, row: Any, stats: Any) -> None:
        """A row finished: the rest of its share of the bar."""
        self._inflight_s -= self._seconds.pop(row.id, 0.0)
        self._done_audio_s = stats.audio_s
        advance = 1.0 - self._fractions.pop(row.id, 0.0)
        self.progress.update(self.task, advance=advance, audio=f"{stats.audio_s / 3600:.2f} h",
                             rtfx=f"{stats.rtfx:.1f}", errors=stats.errors)


def print_summary(console: Console, stats: Any, out_path: Path) -> None:
    table = Table(title="oasr transcribe")
    table.add_column("rows")
    table.add_column("skipped (done before)")
    table.add_column("audio")
    table.add_column("wall")
    table.add_column("RTFx")
    table.add_column("errors")
    wer = ""
    if stats.wer.wer is not None:
        wer = f"{100 * stats.wer.wer:.2f}% over {stats.wer.rows} rows"
    if wer:
        table.add_column("WER (whisper normalizer)")
    cells = [str(stats.rows), str(stats.skipped), f"{stats.audio_s / 60:.1f} min",
             f"{stats.wall_s:.1f} s", f"{stats.rtfx:.1f}", str(stats.errors)]
    table.add_row(*cells, *([wer] if wer else []))
    console.print(table)
    reasons = stats.finish_reasons
    if reasons.get("repetition"):
        console.print(f"[yellow]warning:[/] {reasons['repetition']} rows stopped repeating "
                      "themselves (finish_reason=repetition): the decoder lost the audio; "
                      "check those rows")
    if reasons.get("no_speech"):
        console.print(f"note: {reasons['no_speech']} rows hold no speech: digital silence, "
                      "Whisper's no-speech guard or the speech detector (empty text, "
                      "finish_reason=no_speech)")
    for example in stats.error_examples:
        console.print(f"[yellow]error row[/] {example}")
    from oasr import ops

    console.print(ops.format_dispatch_line(stats.dispatch), soft_wrap=True)
    console.print("rows streamed to stdout" if str(out_path) == "-" else f"wrote {out_path}")
