"""The progress bar and the end-of-run summary of ``oasr transcribe``."""

from __future__ import annotations

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
    """Rows, audio hours, RTFx and ETA, updated as rows finish."""

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

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, row: Any, stats: Any) -> None:
        self.progress.update(self.task, advance=1, audio=f"{stats.audio_s / 3600:.2f} h",
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
    if stats.refs:
        from oasr.metrics.wer import EmptyReferenceError, score

        try:
            result = score(stats.refs, stats.hyps)
            wer = f"{100 * result.wer:.2f}% over {len(stats.refs)} rows"
        except EmptyReferenceError:
            wer = ""
    if wer:
        table.add_column("WER (whisper normalizer)")
    cells = [str(stats.rows), str(stats.skipped), f"{stats.audio_s / 60:.1f} min",
             f"{stats.wall_s:.1f} s", f"{stats.rtfx:.1f}", str(stats.errors)]
    table.add_row(*cells, *([wer] if wer else []))
    console.print(table)
    for example in stats.error_examples:
        console.print(f"[yellow]error row[/] {example}")
    from oasr import ops

    console.print(ops.format_dispatch_line(stats.dispatch), soft_wrap=True)
    console.print(f"wrote {out_path}")
