"""The coverage detector on a thread of its own: a recording's speech is detected in blocks of
one window, handed over ahead of the windows the engine decodes (``RowCoverage.detect_ahead``),
in batches of the blocks waiting, not on the engine's thread after a window's words are back.

Only for a detector that computes on the CPU: work on a CUDA device from a second thread would
break the engine's CUDA-graph captures (a capture forbids other threads' launches), so a CUDA
detector stays on the engine's thread (:func:`runs_ahead`).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from oasr.transcribe.coverage import Span

__all__ = ["MAX_BATCH", "SpeechAhead", "runs_ahead"]

MAX_BATCH = 32  # blocks in one detector call: a batched Silero step costs about one row's


def runs_ahead(detector: Any) -> bool:
    """Whether ``detector`` declares that it computes on the CPU (and so may run beside the
    engine); one that does not say stays on the engine's thread."""
    return str(getattr(detector, "device", "")).startswith("cpu")


class SpeechAhead:
    """One worker thread running ``detector`` over the audio blocks submitted to it: every call
    takes all the blocks waiting (up to ``MAX_BATCH``) through the detector's ``batch`` where
    it has one. ``close`` stops the thread; the futures still waiting are cancelled."""

    def __init__(self, detector: Any, sample_rate: int) -> None:
        self.detector = detector
        self.sample_rate = sample_rate
        self._todo: queue.SimpleQueue[tuple[np.ndarray, Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="oasr-coverage", daemon=True)
        self._thread.start()

    def submit(self, audio: np.ndarray) -> Future:
        future: Future = Future()
        self._todo.put((audio, future))
        return future

    def close(self) -> None:
        self._todo.put(None)
        self._thread.join()

    def _work(self) -> None:
        while True:
            item = self._todo.get()
            items = []
            while item is not None:
                items.append(item)
                if len(items) >= MAX_BATCH or self._todo.empty():
                    break
                item = self._todo.get()
            live = [(a, f) for a, f in items if f.set_running_or_notify_cancel()]
            if live:
                try:
                    for (_, future), spans in zip(live, self._detect([a for a, _ in live])):
                        future.set_result(spans)
                except BaseException as exc:  # each waiting caller sees the detector's error
                    for _, future in live:
                        if not future.done():
                            future.set_exception(exc)
            if item is None:
                self._cancel_rest()
                return

    def _detect(self, audios: list[np.ndarray]) -> list[list[Span]]:
        batch = getattr(self.detector, "batch", None)
        if batch is not None and len(audios) > 1:
            return batch(audios, self.sample_rate)
        return [self.detector(a, self.sample_rate) for a in audios]

    def _cancel_rest(self) -> None:
        while not self._todo.empty():
            item = self._todo.get()
            if item is not None:
                item[1].cancel()
