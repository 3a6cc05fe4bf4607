"""Where the coverage detector runs: a recording's speech is detected in blocks of one window,
handed over ahead of the windows the engine decodes (``RowCoverage.detect_ahead``) and detected
in batches of the blocks waiting.

- :class:`SpeechAhead`: a detector that computes on the CPU runs on a thread of its own, beside
  the engine, while the engine decodes.
- :class:`SpeechBatched`: any other detector (Silero on the engine's GPU) stays on the engine's
  thread, since a second thread's launches would break the engine's CUDA-graph captures (a
  capture forbids them). The blocks handed over wait until a window's speech is first asked
  for; that call detects every block waiting, of every row, in batches of up to
  ``MAX_DEVICE_BATCH`` (a GPU runs a batch of blocks in about the time of one).

:func:`speech_runner` picks one (:func:`runs_ahead`).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from oasr.transcribe.coverage import Span

__all__ = ["MAX_BATCH", "MAX_DEVICE_BATCH", "SpeechAhead", "SpeechBatched", "runs_ahead",
           "speech_runner"]

MAX_BATCH = 32  # blocks in one detector call: a batched Silero step costs about one row's
# Blocks in one call on a GPU: 64 windows of 30 s keep Silero's activations near 250 MB.
MAX_DEVICE_BATCH = 64


def runs_ahead(detector: Any) -> bool:
    """Whether ``detector`` declares that it computes on the CPU (and so may run beside the
    engine); one that does not say stays on the engine's thread."""
    return str(getattr(detector, "device", "")).startswith("cpu")


def speech_runner(detector: Any, sample_rate: int) -> SpeechAhead | SpeechBatched:
    """The detector's runner: its own thread for a CPU detector, else batched on the caller's."""
    if runs_ahead(detector):
        return SpeechAhead(detector, sample_rate)
    return SpeechBatched(detector, sample_rate)


def _detect(detector: Any, audios: list[np.ndarray], sample_rate: int) -> list[list[Span]]:
    batch = getattr(detector, "batch", None)
    if batch is not None and len(audios) > 1:
        return batch(audios, sample_rate)
    return [detector(a, sample_rate) for a in audios]


def _settle(items: list[tuple[np.ndarray, Future]], detector: Any, sample_rate: int) -> bool:
    """Detect the blocks of ``items`` whose futures are not cancelled and set their results;
    a detector's error reaches every one of them. Whether the detector ran."""
    live = [(a, f) for a, f in items if f.set_running_or_notify_cancel()]
    if not live:
        return False
    try:
        for (_, future), spans in zip(live, _detect(detector, [a for a, _ in live],
                                                    sample_rate)):
            future.set_result(spans)
    except BaseException as exc:
        for _, future in live:
            if not future.done():
                future.set_exception(exc)
    return True


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
            _settle(items, self.detector, self.sample_rate)
            if item is None:
                self._cancel_rest()
                return

    def _cancel_rest(self) -> None:
        while not self._todo.empty():
            item = self._todo.get()
            if item is not None:
                item[1].cancel()


class _Deferred(Future):
    """A block's speech that is detected, with every block waiting, when first asked for."""

    def __init__(self, owner: SpeechBatched) -> None:
        super().__init__()
        self._owner = owner

    def result(self, timeout: float | None = None) -> list[Span]:
        if not self.done():
            self._owner.flush()
        return super().result(timeout)


class SpeechBatched:
    """The blocks submitted wait on the caller's thread until one's speech is asked for
    (``Future.result``) or :meth:`flush` is called; then all of them are detected, in batches
    of up to ``MAX_DEVICE_BATCH``. ``close`` cancels the blocks still waiting."""

    def __init__(self, detector: Any, sample_rate: int) -> None:
        self.detector = detector
        self.sample_rate = sample_rate
        self._todo: list[tuple[np.ndarray, Future]] = []
        self.calls = 0  # detector calls made (a batch is one)

    def submit(self, audio: np.ndarray) -> Future:
        future = _Deferred(self)
        self._todo.append((audio, future))
        return future

    def flush(self) -> None:
        todo, self._todo = self._todo, []
        for i in range(0, len(todo), MAX_DEVICE_BATCH):
            self.calls += _settle(todo[i:i + MAX_DEVICE_BATCH], self.detector, self.sample_rate)

    def close(self) -> None:
        todo, self._todo = self._todo, []
        for _, future in todo:
            future.cancel()
