"""The progress: a bar by audio seconds (moving within a long recording before its row
finishes), the ETA from the first finished batch, log lines, the end-of-run notes."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from oasr.cli.transcribe_view import ProgressView


def _completed(view: ProgressView) -> float:
    return view.progress.tasks[0].completed


def _total(view: ProgressView) -> float | None:
    return view.progress.tasks[0].total


def _finish(view: ProgressView, row_id: str, audio_s: float, errors: int = 0) -> None:
    """``audio_s``: the run's audio so far, as RunStats counts it (every finished row)."""
    view.update(SimpleNamespace(id=row_id), SimpleNamespace(audio_s=audio_s, rtfx=1.0,
                                                            errors=errors))


def test_the_bar_counts_audio_seconds_not_rows():
    view = ProgressView(Console(file=io.StringIO()), total=4)
    assert _total(view) is None  # nothing known yet: no total to guess from
    _finish(view, "a", 10.0)
    assert _completed(view) == 10.0 and _total(view) == 40.0  # 10 s a row, four rows
    _finish(view, "b", 40.0)  # 40 s over two rows: 20 s each for the two unseen
    assert _completed(view) == 40.0 and _total(view) == 80.0
    assert view.progress.tasks[0].fields["rows"] == "2/4 rows"
    assert view.progress.tasks[0].fields["audio"] == "0.01/0.02 h audio"


def test_windows_of_a_long_recording_move_the_bar_before_its_row_finishes():
    view = ProgressView(Console(file=io.StringIO()), total=2)
    view.window("long", 30.0, 120.0)
    view.window("long", 30.0, 120.0)
    assert _completed(view) == 60.0
    assert _total(view) == 240.0  # the header's 120 s, and as much for the other row
    _finish(view, "long", 120.0)
    assert _completed(view) == 120.0
    view.window("unknown-length", 30.0, None)  # no duration: the audio moves, the total stays
    assert _completed(view) == 150.0 and _total(view) == 240.0
    _finish(view, "unknown-length", 180.0)
    assert _completed(view) == _total(view) == 180.0  # every row known: the total is exact


def test_a_wrong_header_duration_never_puts_the_bar_past_its_total():
    view = ProgressView(Console(file=io.StringIO()), total=1)
    for _ in range(5):
        view.window("r", 30.0, 60.0)  # the header said 60 s, the audio runs 150 s
    assert _completed(view) == 150.0 and _total(view) == 150.0
    _finish(view, "r", 150.0)
    assert _completed(view) == _total(view) == 150.0


def test_eta_from_the_first_finished_batch_and_log_lines(monkeypatch):
    import oasr.cli.transcribe_view as view_module

    clock = [100.0]
    monkeypatch.setattr(view_module.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    view = ProgressView(Console(file=out, width=200), total=4, mode="log", interval_s=30.0)
    assert view.eta() is None and "ETA -" in view.line()
    clock[0] = 110.0
    _finish(view, "a", 36.0)
    _finish(view, "b", 72.0)  # a batch of two rows, 72 s of audio, in 10 s
    assert view.eta() == 10.0  # 72 s more at 7.2 s of audio a second
    assert out.getvalue() == ""  # the first line waits for the interval
    clock[0] = 131.0
    view.window("c", 60.0, 120.0)  # c's header: 120 s; d unseen: (72 + 120) / 3 = 64 s
    line = out.getvalue().strip()
    assert line.startswith("transcribe: 0.04/0.07 h audio (51.6%), 2/4 rows, RTFx 4.3, "
                           "errors 0")
    assert line.endswith("elapsed 0:00:31, ETA 0:00:29")
    clock[0] = 140.0
    _finish(view, "c", 192.0, errors=1)
    assert out.getvalue().count("\n") == 1  # 9 s after the last line: none yet


def test_rows_total_set_late_as_workers_report_it():
    view = ProgressView(Console(file=io.StringIO()), total=None)
    _finish(view, "0:a", 5.0)
    assert _total(view) is None and "1 rows" in view.line()
    view.set_total_rows(3)
    assert _total(view) == 15.0 and "1/3 rows" in view.line()


def test_progress_modes(monkeypatch):
    from oasr.cli.transcribe_view import progress_mode

    assert progress_mode("auto", Console(file=io.StringIO())) == "log"  # not a terminal
    assert progress_mode("auto", Console(file=io.StringIO(), force_terminal=True)) == "bar"
    assert progress_mode("none", Console(file=io.StringIO())) == "none"
    import pytest

    with pytest.raises(ValueError, match="--progress sometimes"):
        progress_mode("sometimes", Console(file=io.StringIO()))


def test_the_empty_subtitles_note_names_a_few_files():
    from pathlib import Path

    from oasr.cli.transcribe_view import empty_subtitles_note

    assert empty_subtitles_note([]) is None
    files = [Path(f"subs/{i}.vtt") for i in range(5)]
    note = empty_subtitles_note(files)
    assert note.startswith("note: 5 .vtt files hold no cue (0.vtt, 1.vtt, 2.vtt and 2 more)")
