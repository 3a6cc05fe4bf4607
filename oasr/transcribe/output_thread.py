"""Finished rows written, and scored, on their own thread.

Writing a part file (Arrow conversion, Parquet encoding, ``fsync``) and scoring a row's WER
(text normalisation, alignment) are host work the engine need not wait on. The transcriber
hands each finished row to :class:`OutputThread` through a bounded queue (a slow disk slows the
run down rather than filling memory) and goes back to the engine; the thread writes the rows in
the order they were handed over, adds them to the run's :class:`RunningWer`, and offers the
writer its timed flush (``flush_if_due``) whenever it is asked to and at least every
``TICK_S`` while idle, so finished rows reach disk within the writer's ``flush_seconds`` even
while a long batch decodes.

The writer is only ever used by one thread at a time: this one between :meth:`start` and
:meth:`stop`, the caller before and after (``done_ids``, ``metadata``, ``close``, ``abort``).
A writer error stops the writing; it is raised to the caller at its next :meth:`put` or at
:meth:`stop`.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from oasr.io import OutputRow
from oasr.transcribe.running_wer import RunningWer

QUEUE_ROWS = 1024
TICK_S = 0.5
_TICK = object()
_STOP = object()


class OutputThread:
    def __init__(self, writer: Any, wer: RunningWer | None = None,
                 max_rows: int = QUEUE_ROWS, tick_s: float = TICK_S) -> None:
        self.writer = writer
        self.wer = wer
        self.tick_s = tick_s
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_rows)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="oasr-output", daemon=True)
        self._flush_if_due = getattr(writer, "flush_if_due", None)

    def start(self) -> OutputThread:
        self._thread.start()
        return self

    def put(self, out: OutputRow, ref: str | None) -> None:
        """Queue a finished row (and its reference text, scored when not None)."""
        self._raise()
        self._queue.put((out, ref))

    def tick(self) -> None:
        """Offer the writer its timed flush (called after every engine output)."""
        if self._flush_if_due is not None and self._error is None:
            try:
                self._queue.put_nowait(_TICK)
            except queue.Full:  # rows are queued: the thread is busy writing anyway
                pass

    def stop(self, raise_error: bool = True) -> None:
        """Write every queued row, end the thread, and raise its error (if any)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        if raise_error:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.tick_s)
            except queue.Empty:
                item = _TICK
            if item is _STOP:
                return
            if self._error is not None:
                continue  # drain, so a caller blocked on a full queue goes on to see the error
            try:
                if item is _TICK:
                    if self._flush_if_due is not None:
                        self._flush_if_due()
                    continue
                out, ref = item
                self.writer.write(out)
                if ref is not None and self.wer is not None and not out.error:
                    self.wer.add(ref, out.text or "")
            except BaseException as exc:
                self._error = exc
