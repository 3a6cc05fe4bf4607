"""Where the coverage detector runs: a CPU detector on its own thread (windows waiting detected
in one batched call), any other (a CUDA detector) batched on the engine's thread over every
block waiting when one is first asked for (a second thread's launches would break the engine's
graph captures); a detector's error reaches every caller either way."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from oasr.transcribe.coverage import EnergySpeech, SegmenterSpeech
from oasr.transcribe.speech_ahead import (
    MAX_DEVICE_BATCH,
    SpeechAhead,
    SpeechBatched,
    runs_ahead,
    speech_runner,
)


class _Batched:
    """Speech = the whole clip; records each call's batch size; blocks until released."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.gate = threading.Event()

    def __call__(self, audio, sample_rate):
        return self.batch([audio], sample_rate)[0]

    def batch(self, audios, sample_rate):
        self.gate.wait(5)
        self.sizes.append(len(audios))
        return [[(0.0, len(a) / sample_rate)] for a in audios]


def test_windows_waiting_are_detected_in_one_call():
    detector = _Batched()
    ahead = SpeechAhead(detector, 100)
    try:
        futures = [ahead.submit(np.zeros(100 * (i + 1), np.float32)) for i in range(5)]
        detector.gate.set()
        assert [f.result(5) for f in futures] == [[(0.0, float(i + 1))] for i in range(5)]
        # The first window may be taken alone before the others arrive; the rest wait together.
        assert sum(detector.sizes) == 5 and len(detector.sizes) <= 2
    finally:
        ahead.close()


def test_a_detectors_error_reaches_the_caller():
    def broken(audio, sample_rate):
        raise RuntimeError("detector broke")

    ahead = SpeechAhead(broken, 16000)
    try:
        with pytest.raises(RuntimeError, match="detector broke"):
            ahead.submit(np.zeros(10, np.float32)).result(5)
    finally:
        ahead.close()


@pytest.mark.parametrize(("device", "ahead"), [("cpu", True), ("cuda:0", False), ("cuda", False)])
def test_only_a_cpu_detector_runs_beside_the_engine(device, ahead):
    segmenter = SimpleNamespace(detector=SimpleNamespace(device=torch.device(device)))
    assert runs_ahead(SegmenterSpeech(segmenter, "silero")) is ahead
    assert runs_ahead(EnergySpeech())  # the energy rule: numpy on the CPU
    # A detector that does not say where it computes stays on the engine's thread.
    assert not runs_ahead(SegmenterSpeech(SimpleNamespace(detector=object()), "x"))


def test_a_device_detector_runs_every_block_waiting_when_one_is_asked_for():
    detector = _Batched()
    detector.gate.set()
    runner = SpeechBatched(detector, 100)
    n = MAX_DEVICE_BATCH + 6
    futures = [runner.submit(np.zeros(100 * (i % 3 + 1), np.float32)) for i in range(n)]
    futures[1].cancel()  # a block the row no longer needs is not detected
    assert detector.sizes == [] and not any(f.done() for f in futures[2:])
    # Asking for the last block detects all of them, on this thread, in batches of the cap.
    assert futures[-1].result() == [(0.0, float((n - 1) % 3 + 1))]
    assert detector.sizes == [MAX_DEVICE_BATCH - 1, 6] and runner.calls == 2
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures[2:5]] == [[(0.0, 3.0)], [(0.0, 1.0)], [(0.0, 2.0)]]
    later = runner.submit(np.zeros(100, np.float32))
    runner.close()  # what still waits is cancelled
    assert later.cancelled() and detector.sizes == [MAX_DEVICE_BATCH - 1, 6]


def test_a_batched_detectors_error_reaches_every_waiting_caller():
    def broken(audio, sample_rate):
        raise RuntimeError("detector broke")

    runner = SpeechBatched(broken, 16000)
    futures = [runner.submit(np.zeros(10, np.float32)) for _ in range(3)]
    for future in futures:
        with pytest.raises(RuntimeError, match="detector broke"):
            future.result()


@pytest.mark.parametrize(("device", "kind"), [("cpu", SpeechAhead), ("cuda:0", SpeechBatched),
                                              ("", SpeechBatched)])
def test_the_runner_follows_where_the_detector_computes(device, kind):
    segmenter = SimpleNamespace(detector=SimpleNamespace(device=device))
    runner = speech_runner(SegmenterSpeech(segmenter, "silero"), 16000)
    try:
        assert type(runner) is kind
    finally:
        runner.close()
