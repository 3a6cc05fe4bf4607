"""The progress (a bar, or log lines for a batch job) and the end-of-run summary of
``oasr transcribe``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

PROGRESS_MODES = ("auto", "bar", "log", "none")
# Seconds between two progress lines when stderr is not a terminal (--progress log).
LOG_INTERVAL_S = 30.0


def progress_mode(asked: str, console: Console) -> str:
    """``auto``: a bar on a terminal, log lines otherwise (a batch job's log file)."""
    if asked not in PROGRESS_MODES:
        raise ValueError(f"--progress {asked}: use one of {', '.join(PROGRESS_MODES)}")
    if asked == "auto":
        return "bar" if console.is_terminal else "log"
    return asked


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class _Eta(ProgressColumn):
    """Time left from the share of the rows done so far (rows, and windows of long rows),
    shown from the first settled window on; rich's own column waits for a speed sample."""

    def __init__(self, view: ProgressView) -> None:
        super().__init__()
        self.view = view

    def render(self, task: Any) -> Text:
        eta = self.view.eta()
        return Text(f"ETA {_clock(eta)}" if eta is not None else "ETA -", style="cyan")


class ProgressView:
    """Rows, audio hours, RTFx and ETA: updated as rows finish and, within a long recording,
    as each window settles (the bar by the window's share of the recording's duration).

    ``mode``: ``bar`` (a rich bar), ``log`` (a plain line on the console every
    ``interval_s``: what a batch job's log keeps; the summary ends the run), ``none``."""

    def __init__(self, console: Console, total: int | None, mode: str = "bar",
                 interval_s: float = LOG_INTERVAL_S) -> None:
        if mode not in ("bar", "log", "none"):
            raise ValueError(f"progress mode {mode!r}: use bar, log or none")
        self.console, self.mode, self.interval_s = console, mode, interval_s
        self.enabled = mode != "none"
        self.progress = Progress(
            TextColumn("[bold]transcribe"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[audio]}"), TextColumn("RTFx {task.fields[rtfx]}"),
            TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(), _Eta(self),
            console=console, disable=mode != "bar",
        )
        self.task = self.progress.add_task("rows", total=total, audio="0.00 h", rtfx="-",
                                           errors=0)
        self._start = time.perf_counter()
        self._last_line = self._start
        self._fractions: dict[str, float] = {}  # row id -> share of the bar advanced so far
        self._seconds: dict[str, float] = {}  # row id -> seconds settled, row not yet finished
        self._inflight_s = 0.0
        self._done_audio_s = 0.0
        self._errors = 0

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    @property
    def _task(self) -> Any:
        return self.progress.tasks[0]

    def eta(self) -> float | None:
        """Seconds left at the current pace, or None before any progress (or no total)."""
        task = self._task
        if not task.total or task.completed <= 0:
            return None
        elapsed = time.perf_counter() - self._start
        return max(elapsed * (task.total - task.completed) / task.completed, 0.0)

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
        self._maybe_log()

    def update(self, row: Any, stats: Any) -> None:
        """A row finished: the rest of its share of the bar."""
        self._inflight_s -= self._seconds.pop(row.id, 0.0)
        self._done_audio_s = stats.audio_s
        self._errors = stats.errors
        advance = 1.0 - self._fractions.pop(row.id, 0.0)
        self.progress.update(self.task, advance=advance, audio=f"{stats.audio_s / 3600:.2f} h",
                             rtfx=f"{stats.rtfx:.1f}", errors=stats.errors)
        self._maybe_log()

    def line(self) -> str:
        """The progress as one plain line (``--progress log``)."""
        task, elapsed = self._task, time.perf_counter() - self._start
        audio = self._done_audio_s + self._inflight_s
        rows = f"{int(task.completed):,}" + (f"/{task.total:,.0f} rows "
                                           f"({100 * task.completed / task.total:.1f}%)"
                                           if task.total else " rows")
        rtfx = f"{audio / elapsed:.1f}" if elapsed > 0 else "-"
        eta = self.eta()
        return (f"transcribe: {rows}, {audio / 3600:.2f} h audio, RTFx {rtfx}, errors "
                f"{self._errors}, elapsed {_clock(elapsed)}, ETA "
                f"{_clock(eta) if eta is not None else '-'}")

    def _maybe_log(self) -> None:
        if self.mode != "log":
            return
        now = time.perf_counter()
        if now - self._last_line >= self.interval_s:
            self._log_line(now)

    def _log_line(self, now: float | None = None) -> None:
        self._last_line = now or time.perf_counter()
        self.console.print(self.line(), soft_wrap=True, highlight=False, markup=False)


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
    if stats.coverage_warnings:
        console.print(f"[yellow]warning:[/] {stats.coverage_warnings} rows keep detected speech "
                      "without transcribed words after decoding it again (each row says where; "
                      "see its coverage column)")
    if reasons.get("no_speech"):
        console.print(f"note: {reasons['no_speech']} rows hold no speech: digital silence, "
                      "Whisper's no-speech guard or the speech detector (empty text, "
                      "finish_reason=no_speech)")
    for example in stats.error_examples:
        console.print(f"[yellow]error row[/] {example}")
    from oasr import ops

    console.print(ops.format_dispatch_line(stats.dispatch), soft_wrap=True)
    console.print("rows streamed to stdout" if str(out_path) == "-" else f"wrote {out_path}")
