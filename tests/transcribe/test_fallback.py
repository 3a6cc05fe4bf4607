"""Whisper's temperature fallback in the runner."""

from __future__ import annotations

from oasr.engine.request import RequestOutput
from oasr.io import ManifestRow
from oasr.transcribe.fallback import TemperatureFallback, compression_ratio
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from tests.transcribe.conftest import build_tiny_engine, clip


def test_thresholds():
    fb = TemperatureFallback((0.0, 0.2, 0.4))
    loop = RequestOutput("r", text="the cat " * 40, avg_logprob=-0.1)
    assert compression_ratio(loop.text) > 2.4 and "compression ratio" in fb.failed(loop)
    unsure = RequestOutput("r", text="a fine sentence", avg_logprob=-1.5)
    assert "log-probability -1.50" in fb.failed(unsure)
    good = RequestOutput("r", text="a fine sentence", avg_logprob=-0.3)
    assert fb.failed(good) is None
    assert fb.retry(loop, 0) and fb.retry(loop, 1) and not fb.retry(loop, 2)
    assert not TemperatureFallback((0.0,)).retry(loop, 0)


def _decode(fallback: TemperatureFallback) -> tuple[list[str], list[float]]:
    engine = build_tiny_engine(window_s=6.0)
    temps: list[float] = []
    add = engine.add_request

    def spy(request):
        temps.append(request.decoding.temperature)
        return add(request)

    engine.add_request = spy
    options = TranscribeOptions(inputs=[], fallback=fallback)
    rows = [ManifestRow("a", str(clip("1688-142285-0002")))]
    outs = [o for o, _ in Transcriber(engine, options).run(iter(rows))]
    return [o.text for o in outs], temps


def test_a_failing_window_is_decoded_at_each_temperature_then_stands():
    always = TemperatureFallback((0.0, 0.5, 1.0), logprob_threshold=100.0)
    texts, temps = _decode(always)
    assert temps == [0.0, 0.5, 1.0] and texts[0]
    assert _decode(always)[0] == texts  # seeded: the same draws
    never = TemperatureFallback((0.0, 0.5, 1.0), compression_ratio_threshold=None,
                                logprob_threshold=None)
    assert _decode(never)[1] == [0.0]


def test_long_recording_reports_each_window_before_it_finishes(tmp_path):
    import numpy as np
    import soundfile as sf

    pieces = [sf.read(clip(c), dtype="float32")[0]
              for c in ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004")]
    long = tmp_path / "long.wav"
    sf.write(long, np.concatenate(pieces), 16000)
    events: list[tuple[str, float, float | None]] = []
    finished: list[int] = []
    options = TranscribeOptions(inputs=[], on_window=lambda *e: events.append(e))
    engine = build_tiny_engine(window_s=6.0)
    for _ in Transcriber(engine, options).run(iter([ManifestRow("L", str(long))])):
        finished.append(len(events))
    duration = sf.info(long).duration
    assert len(events) > 1 and finished == [len(events)]  # all reported before the row
    assert {e[0] for e in events} == {"L"} and events[0][2] == duration
    assert abs(sum(e[1] for e in events) - duration) < 0.5
