"""The output thread: rows written in the order handed over, WER scored there, timed flushes
while idle, a writer error raised to the caller."""

from __future__ import annotations

import threading
import time

import pytest

from oasr.io import OutputError, OutputRow
from oasr.transcribe.output_thread import OutputThread
from oasr.transcribe.running_wer import RunningWer


class _Writer:
    def __init__(self, fail_at: int | None = None) -> None:
        self.rows: list[str] = []
        self.flush_checks = 0
        self.threads: set[str] = set()
        self.fail_at = fail_at

    def write(self, row: OutputRow) -> None:
        self.threads.add(threading.current_thread().name)
        if self.fail_at is not None and len(self.rows) == self.fail_at:
            raise OutputError("disk full")
        self.rows.append(row.id)

    def flush_if_due(self) -> None:
        self.flush_checks += 1


def test_rows_are_written_in_order_on_the_thread_and_scored():
    writer, wer = _Writer(), RunningWer()
    output = OutputThread(writer, wer).start()
    for i in range(200):
        output.put(OutputRow(id=f"r{i}", text="a b"), "a c" if i % 2 else None)
    output.put(OutputRow(id="bad", text=None, error="unreadable"), "a b")  # not scored
    output.stop()
    assert writer.rows == [f"r{i}" for i in range(200)] + ["bad"]
    assert writer.threads == {"oasr-output"}
    assert wer.rows == 100 and wer.ref_words == 200 and wer.errors == 100


def test_the_writer_is_offered_its_timed_flush_when_asked_and_while_idle():
    writer = _Writer()
    output = OutputThread(writer, tick_s=0.02).start()
    output.tick()
    deadline = time.monotonic() + 10
    while writer.flush_checks < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    output.stop()
    assert writer.flush_checks >= 3


def test_a_writer_error_is_raised_to_the_caller():
    writer = _Writer(fail_at=2)
    output = OutputThread(writer, max_rows=4).start()
    with pytest.raises(OutputError, match="disk full"):
        for i in range(10_000):  # a full queue does not block forever on a dead writer
            output.put(OutputRow(id=f"r{i}", text="x"), None)
            time.sleep(0.0005)
        output.stop()
    output.stop(raise_error=False)
    assert writer.rows == ["r0", "r1"]
