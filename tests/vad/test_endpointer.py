"""The endpointer (sherpa-onnx's three rules, the hysteresis band, the silence floor) against
synthetic speech-probability traces."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.vad.endpointer import EndpointConfig, Endpointer, EndpointRule

FRAME = 0.03


def trace(*runs):
    return np.concatenate([np.full(n, p, dtype=np.float32) for p, n in runs])


def endpoints(ep: Endpointer, probs) -> list[tuple[int, int, bool]]:
    return [(e.frame, e.rule, e.has_speech) for e in ep.push(probs)[1]]


def _push(ep: Endpointer, speech: int, silence: int):
    return ep.push(np.r_[np.ones(speech), np.zeros(silence)])[1]


def test_rule1_silence_only_after_2_4_s() -> None:
    ep = Endpointer(FRAME)
    assert _push(ep, 0, 79) == []  # 2.37 s
    (e,) = _push(ep, 0, 1)
    assert (e.rule, e.has_speech, e.frame) == (1, False, 80)


def test_rule2_after_1_2_s_of_silence_following_speech() -> None:
    ep = Endpointer(FRAME)
    assert _push(ep, 50, 39) == []
    (e,) = _push(ep, 0, 1)
    assert (e.rule, e.has_speech, e.frame) == (2, True, 90)
    # The next utterance starts after it: silence alone ends it by rule 1.
    (e,) = _push(ep, 0, 80)
    assert (e.rule, e.has_speech) == (1, False)


def test_rule3_bounds_an_utterance_that_never_pauses() -> None:
    ep = Endpointer(FRAME)
    events = ep.push(np.ones(1400))[1]  # 42 s of speech
    assert [e.rule for e in events] == [3, 3]
    assert [e.frame for e in events] == [667, 1334]  # ceil(20 / 0.03) frames each


def test_rules_are_configurable_and_can_be_off() -> None:
    cfg = EndpointConfig(rule2=EndpointRule(True, 0.3, 0.0))
    ep = Endpointer(FRAME, cfg)
    (e,) = _push(ep, 10, 10)
    assert e.rule == 2 and e.frame == 20
    off = Endpointer(FRAME, EndpointConfig(enabled=False))
    speech, events = off.push(np.r_[np.ones(5), np.zeros(2000)])
    assert events == [] and speech.sum() == 5  # frames are still classified


def test_frame_classes_follow_the_threshold() -> None:
    speech, _ = Endpointer(0.01).push(trace((0.0, 30), (0.9, 100), (0.49, 5), (0.5, 5)))
    assert speech.tolist() == [False] * 30 + [True] * 100 + [False] * 5 + [True] * 5


def test_chunking_does_not_change_classes_or_endpoints() -> None:
    probs = trace((0.0, 30), (0.9, 100), (0.0, 150), (0.8, 40), (0.1, 130), (0.45, 20))
    cfg = EndpointConfig(neg_threshold=0.35)
    whole_speech, whole = Endpointer(0.01, cfg).push(probs)
    ep = Endpointer(0.01, cfg)
    parts = [ep.push(probs[i:i + 7]) for i in range(0, len(probs), 7)]
    assert np.array_equal(np.concatenate([p[0] for p in parts]), whole_speech)
    assert [e for p in parts for e in p[1]] == whole
    assert [(e.frame, e.rule) for e in whole] == [(250, 2), (440, 2)]


def test_hysteresis_band_keeps_the_previous_class() -> None:
    # 0.4 sits between neg_threshold (0.35) and the threshold: it continues the speech state.
    probs = trace((0.9, 10), (0.4, 200))
    speech, events = Endpointer(0.01, EndpointConfig(neg_threshold=0.35)).push(probs)
    assert speech.all() and events == []
    # Without the band (the default) those frames are silence and rule 2 ends the utterance.
    speech, events = Endpointer(0.01).push(probs)
    assert speech.sum() == 10 and [(e.frame, e.rule) for e in events] == [(130, 2)]
    # After an endpoint the band starts from silence: 0.4 does not reopen speech.
    probs = trace((0.9, 10), (0.0, 120), (0.4, 50))
    speech, events = Endpointer(0.01, EndpointConfig(neg_threshold=0.35)).push(probs)
    assert speech.sum() == 10 and len(events) == 1


def test_floor_lengthens_trailing_silence() -> None:
    cfg = EndpointConfig(rule2=EndpointRule(True, 0.1, 0.0))
    probs = trace((0.9, 20), (0.0, 100))
    assert endpoints(Endpointer(0.01, cfg), probs) == [(30, 2, True)]
    assert endpoints(Endpointer(0.01, cfg, min_silence_floor_s=0.5), probs) == [(70, 2, True)]
    # a rule with no trailing-silence condition (rule 3) is not lengthened
    cfg = EndpointConfig(rule3=EndpointRule(False, 0.0, 0.5))
    assert endpoints(Endpointer(0.01, cfg, min_silence_floor_s=0.3), np.ones(60)) == [
        (50, 3, True)]


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="speech_threshold"):
        EndpointConfig(speech_threshold=0.0)
    with pytest.raises(ValueError, match="neg_threshold"):
        EndpointConfig(speech_threshold=0.5, neg_threshold=0.6)
