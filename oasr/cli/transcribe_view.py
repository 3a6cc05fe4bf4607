"""The progress (a bar, or log lines for a batch job) and the end-of-run summary of
``oasr transcribe``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
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
    """Time left at the audio pace so far, shown from the first finished row (or settled window
    of a long one) on; rich's own column waits for a speed sample."""

    def __init__(self, view: ProgressView) -> None:
        super().__init__()
        self.view = view

    def render(self, task: Any) -> Text:
        eta = self.view.eta()
        return Text(f"ETA {_clock(eta)}" if eta is not None else "ETA -", style="cyan")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


class ProgressView:
    """Audio done of the estimated total, rows, RTFx and ETA: updated as rows finish and, within
    a long recording, as each window settles.

    The bar counts audio seconds, not rows: a manifest's rows range from a second to hours. The
    total audio is not read up front (that would open every file before decoding); it is
    estimated as the audio of the rows known so far (finished rows, and in-flight rows whose
    header gave a duration) plus their mean for each row not yet seen, so it firms up as rows
    finish and the ETA (``elapsed * audio left / audio done``) is there from the first finished
    batch on.

    ``mode``: ``bar`` (a rich bar), ``log`` (a plain line on the console every
    ``interval_s``: what a batch job's log keeps; the summary ends the run), ``none``."""

    def __init__(self, console: Console, total: int | None, mode: str = "bar",
                 interval_s: float = LOG_INTERVAL_S) -> None:
        if mode not in ("bar", "log", "none"):
            raise ValueError(f"progress mode {mode!r}: use bar, log or none")
        self.console, self.mode, self.interval_s = console, mode, interval_s
        self.enabled = mode != "none"
        self.total_rows = total
        self._headers: dict[str, float] = {}  # in-flight row id -> duration its header gave
        self._seconds: dict[str, float] = {}  # in-flight row id -> seconds settled so far
        self._done_audio_s = 0.0
        self._rows_done = 0
        self._errors = 0
        self.progress = Progress(
            TextColumn("[bold]transcribe"), BarColumn(), TextColumn("{task.fields[audio]}"),
            TextColumn("{task.fields[rows]}"), TextColumn("RTFx {task.fields[rtfx]}"),
            TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(), _Eta(self),
            console=console, disable=mode != "bar",
        )
        self.task = self.progress.add_task("audio", total=None, audio="0.00 h audio",
                                           rows=self._rows_text(), rtfx="-", errors=0)
        self._start = time.perf_counter()
        self._last_line = self._start

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def set_total_rows(self, total: int | None) -> None:
        """The number of rows the run will finish (known late when workers report it)."""
        self.total_rows = total
        self._refresh()

    # -------------------------------------------------------------- the figures

    def audio_s(self) -> float:
        """Seconds of audio decoded: finished rows and the settled windows of unfinished ones."""
        return self._done_audio_s + sum(self._seconds.values())

    def total_audio_s(self) -> float | None:
        """The estimated seconds of audio in the whole run, or None before any row is known
        (or without a row count)."""
        if self.total_rows is None:
            return None
        in_flight = {rid: max(d, self._seconds.get(rid, 0.0)) for rid, d in self._headers.items()}
        known_rows = self._rows_done + len(in_flight)
        if known_rows == 0:
            return None
        known_s = self._done_audio_s + sum(in_flight.values())
        unseen = max(self.total_rows - known_rows, 0)
        return max(known_s + unseen * known_s / known_rows, self.audio_s())

    def eta(self) -> float | None:
        """Seconds left at the current audio pace, or None before any audio is done (or no
        total)."""
        total, audio = self.total_audio_s(), self.audio_s()
        if total is None or audio <= 0.0:
            return None
        elapsed = time.perf_counter() - self._start
        return max(elapsed * (total - audio) / audio, 0.0)

    def _rows_text(self) -> str:
        total = f"/{self.total_rows:,}" if self.total_rows is not None else ""
        return f"{self._rows_done:,}{total} rows"

    def _audio_text(self) -> str:
        total = self.total_audio_s()
        if total is None:
            return f"{_hours(self.audio_s())} audio"
        return f"{self.audio_s() / 3600:.2f}/{_hours(total)} audio"

    def _refresh(self) -> None:
        elapsed = time.perf_counter() - self._start
        audio = self.audio_s()
        self.progress.update(self.task, total=self.total_audio_s(), completed=audio,
                             audio=self._audio_text(), rows=self._rows_text(),
                             rtfx=f"{audio / elapsed:.1f}" if elapsed > 0 else "-",
                             errors=self._errors)
        self._maybe_log()

    # -------------------------------------------------------------- the events

    def window(self, row_id: str, seconds: float, duration: float | None) -> None:
        """A window of a long recording settled: its seconds count as done, and the header's
        ``duration`` (when it gave one) joins the estimated total."""
        self._seconds[row_id] = self._seconds.get(row_id, 0.0) + seconds
        if duration:
            self._headers[row_id] = float(duration)
        self._refresh()

    def update(self, row: Any, stats: Any) -> None:
        """A row finished; ``stats.audio_s`` is the audio of every row finished so far."""
        self._seconds.pop(row.id, None)
        self._headers.pop(row.id, None)
        self._done_audio_s = stats.audio_s
        self._errors = stats.errors
        self._rows_done += 1
        self._refresh()

    def line(self) -> str:
        """The progress as one plain line (``--progress log``)."""
        elapsed = time.perf_counter() - self._start
        audio, total = self.audio_s(), self.total_audio_s()
        share = f" ({100 * audio / total:.1f}%)" if total else ""
        rtfx = f"{audio / elapsed:.1f}" if elapsed > 0 else "-"
        eta = self.eta()
        return (f"transcribe: {self._audio_text()}{share}, {self._rows_text()}, RTFx {rtfx}, "
                f"errors {self._errors}, elapsed {_clock(elapsed)}, ETA "
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


def empty_subtitles_note(files: list[Path], shown: int = 3) -> str | None:
    """The note for subtitle files written without a cue (recordings without speech), or
    None: such a file is valid but a player shows nothing, which looks like a failure."""
    if not files:
        return None
    names = ", ".join(f.name for f in files[:shown]) + (
        f" and {len(files) - shown} more" if len(files) > shown else "")
    ext = files[0].suffix
    many = len(files) != 1
    return (f"note: {len(files)} {ext} file{'s hold' if many else ' holds'} no cue "
            f"({names}): the recording has no speech (finish_reason=no_speech) or no text; "
            f"the file is still valid {ext} and a rerun leaves it as it is")


def print_summary(console: Console, stats: Any, out_path: Path,
                  empty_subtitles: list[Path] | None = None) -> None:
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
    note = empty_subtitles_note(empty_subtitles or [])
    if note:
        console.print(note, soft_wrap=True, highlight=False, markup=False)
    for example in stats.error_examples:
        console.print(f"[yellow]error row[/] {example}")
    from oasr import ops

    console.print(ops.format_dispatch_line(stats.dispatch), soft_wrap=True)
    console.print("rows streamed to stdout" if str(out_path) == "-" else f"wrote {out_path}")
