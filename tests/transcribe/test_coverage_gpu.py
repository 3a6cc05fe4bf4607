"""The coverage detector on the engine's GPU, on the real Whisper tiny.en and real speech: Silero
is built on CUDA beside a CUDA engine and runs batched on the engine's thread (never a second
thread, whose launches would break the engine's graph captures), and the transcript, its words
and its coverage are those of the same run with the detector on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio import load_audio
from tests.helpers.data import SHARED_DATA
from tests.helpers.real_tiny_en import require_tiny_en_and_speech

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

require_tiny_en_and_speech(AUDIO)
pytest.importorskip("silero_vad")


def _recording() -> np.ndarray:
    """Eight utterances of three speakers with a second of silence between them (72 s)."""
    paths = sorted(AUDIO.glob("*.flac"))[::9][:8]
    pause = np.zeros(16000, np.float32)
    return np.concatenate([part for p in paths for part in (load_audio(str(p), 16000), pause)])


def _run(monkeypatch, detector_device: str | None):
    import oasr
    import oasr.transcribe.coverage as coverage
    import oasr.transcribe.runner as runner

    runners = []
    build = coverage.build_coverage_detector
    make = runner.speech_runner
    if detector_device is not None:  # the detector where the test puts it, not the engine's
        monkeypatch.setattr(coverage, "build_coverage_detector",
                            lambda *a, **k: build(*a, **{**k, "device": detector_device}))
    monkeypatch.setattr(runner, "speech_runner",
                        lambda *a: runners.append(make(*a)) or runners[-1])
    model = oasr.load(device="cuda", dtype="fp16", language_check=False, batch_size=16)
    out = model.transcript(_recording(), sample_rate=16000, word_timestamps=True)
    monkeypatch.undo()
    return out, runners


def test_the_detector_on_the_gpu_gives_the_cpu_detectors_transcript(monkeypatch):
    from oasr.transcribe.speech_ahead import SpeechAhead, SpeechBatched

    on_gpu, gpu_runners = _run(monkeypatch, None)
    on_cpu, cpu_runners = _run(monkeypatch, "cpu")
    (gpu_runner,), (cpu_runner,) = gpu_runners, cpu_runners
    assert isinstance(gpu_runner, SpeechBatched) and isinstance(cpu_runner, SpeechAhead)
    assert str(gpu_runner.detector.device).startswith("cuda")
    # Each window's blocks (of 30 s) waited together: fewer detector calls than blocks.
    blocks = -(-len(_recording()) // (30 * 16000))
    assert 1 <= gpu_runner.calls < blocks
    assert len(on_gpu.text.split()) > 100
    assert on_gpu.text == on_cpu.text
    assert [w.word for w in on_gpu.words] == [w.word for w in on_cpu.words]
    assert on_gpu.coverage is not None and abs(on_gpu.coverage - on_cpu.coverage) <= 1e-3
