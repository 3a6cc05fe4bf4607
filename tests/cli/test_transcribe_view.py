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
