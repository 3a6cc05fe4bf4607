"""The progress bar moves within a long recording, before its row finishes."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from oasr.cli.transcribe_view import ProgressView


def _completed(view: ProgressView) -> float:
    return view.progress.tasks[0].completed


def test_windows_move_the_bar_and_the_row_completes_it():
    view = ProgressView(Console(file=io.StringIO()), total=2)
    view.window("long", 30.0, 120.0)
    view.window("long", 30.0, 120.0)
    assert _completed(view) == 0.5
    assert view.progress.tasks[0].fields["audio"] == "0.02 h"  # 60 s before any row finished
    view.update(SimpleNamespace(id="long"), SimpleNamespace(audio_s=120.0, rtfx=2.0, errors=0))
    assert _completed(view) == 1.0
    view.window("unknown-length", 30.0, None)  # no duration: the audio moves, the bar waits
    assert _completed(view) == 1.0
    view.update(SimpleNamespace(id="unknown-length"),
                SimpleNamespace(audio_s=180.0, rtfx=2.0, errors=0))
    assert _completed(view) == 2.0


def test_a_wrong_header_duration_never_overruns_the_row():
    view = ProgressView(Console(file=io.StringIO()), total=1)
    for _ in range(5):
        view.window("r", 30.0, 60.0)  # the header said 60 s, the audio runs 150 s
    assert _completed(view) < 1.0
    view.update(SimpleNamespace(id="r"), SimpleNamespace(audio_s=150.0, rtfx=1.0, errors=0))
    assert abs(_completed(view) - 1.0) < 1e-9


def test_eta_from_the_first_progress_and_log_lines(monkeypatch):
    import oasr.cli.transcribe_view as view_module

    clock = [100.0]
    monkeypatch.setattr(view_module.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    view = ProgressView(Console(file=out, width=200), total=4, mode="log", interval_s=30.0)
    assert view.eta() is None and "ETA -" in view.line()
    clock[0] = 110.0
    view.update(SimpleNamespace(id="a"), SimpleNamespace(audio_s=36.0, rtfx=3.6, errors=0))
    assert view.eta() == 30.0  # one row of four in 10 s: three more take 30 s
    assert out.getvalue() == ""  # the first line waits for the interval
    clock[0] = 131.0
    view.window("b", 60.0, 120.0)
    line = out.getvalue().strip()
    assert line.startswith("transcribe: 1/4 rows (37.5%), 0.03 h audio, RTFx 3.1, errors 0")
    assert line.endswith("elapsed 0:00:31, ETA 0:00:52")
    clock[0] = 140.0
    view.update(SimpleNamespace(id="b"), SimpleNamespace(audio_s=156.0, rtfx=3.9, errors=1))
    assert out.getvalue().count("\n") == 1  # 9 s after the last line: none yet


def test_progress_modes(monkeypatch):
    from oasr.cli.transcribe_view import progress_mode

    assert progress_mode("auto", Console(file=io.StringIO())) == "log"  # not a terminal
    assert progress_mode("auto", Console(file=io.StringIO(), force_terminal=True)) == "bar"
    assert progress_mode("none", Console(file=io.StringIO())) == "none"
    import pytest

    with pytest.raises(ValueError, match="--progress sometimes"):
        progress_mode("sometimes", Console(file=io.StringIO()))
