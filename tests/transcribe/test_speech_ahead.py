"""The coverage detector's own thread: windows waiting are detected in one batched call, a
detector's error reaches the caller, and a detector on a CUDA device never leaves the engine's
thread (a second thread's launches would break the engine's graph captures)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from oasr.transcribe.coverage import EnergySpeech, SegmenterSpeech
from oasr.transcribe.speech_ahead import SpeechAhead, runs_ahead


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
