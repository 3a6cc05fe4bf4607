"""The endpointer against synthetic probability traces."""

import numpy as np

from oasr.vad.endpointer import EndpointConfig, Endpointer, EndpointRule

FRAME = 0.01


def trace(*runs):
    return np.concatenate([np.full(n, p, dtype=np.float32) for p, n in runs])


def kinds(events):
    return [(e.kind, round(e.time_s, 2), e.rule) for e in events]


def test_speech_then_silence_fires_the_after_speech_rule():
    ep = Endpointer(FRAME)
    events = ep.feed(trace((0.0, 30), (0.9, 100), (0.0, 150)))
    assert kinds(events) == [("speech_start", 0.3, None), ("endpoint", 2.5, 1)]


def test_chunking_does_not_change_events():
    probs = trace((0.0, 30), (0.9, 100), (0.0, 150), (0.8, 40), (0.1, 130))
    whole = Endpointer(FRAME).feed(probs)
    ep = Endpointer(FRAME)
    chunked = [e for i in range(0, len(probs), 7) for e in ep.feed(probs[i:i + 7])]
    assert kinds(chunked) == kinds(whole)
    assert [e.kind for e in whole] == ["speech_start", "endpoint", "speech_start", "endpoint"]


def test_silence_only_fires_the_no_speech_rule():
    events = Endpointer(FRAME).feed(np.zeros(500, np.float32))
    assert kinds(events) == [("endpoint", 2.4, 0), ("endpoint", 4.8, 0)]


def test_long_utterance_fires_the_length_rule():
    events = Endpointer(FRAME).feed(np.full(2100, 0.9, np.float32))
    # Speech goes on: the next utterance starts where the cut fell.
    assert kinds(events) == [("speech_start", 0.0, None), ("endpoint", 20.0, 2),
                             ("speech_start", 20.0, None)]


def test_hysteresis_band_keeps_speaking():
    # 0.4 sits between neg_threshold (0.35) and threshold: it continues the speech state.
    events = Endpointer(FRAME).feed(trace((0.9, 10), (0.4, 200)))
    assert [e.kind for e in events] == ["speech_start"]


def test_floor_lengthens_trailing_silence():
    cfg = EndpointConfig(rules=(EndpointRule(True, 100.0, 0.0),))
    probs = trace((0.9, 20), (0.0, 100))
    assert kinds(Endpointer(FRAME, cfg).feed(probs))[1] == ("endpoint", 0.3, 0)
    assert kinds(Endpointer(FRAME, cfg, min_silence_floor_ms=500).feed(probs))[1] == (
        "endpoint", 0.7, 0)
