"""sherpa-onnx's three endpoint rules over synthetic speech-probability traces."""

from __future__ import annotations

import numpy as np

from oasr.streaming.endpoint import EndpointConfig, Endpointer, EndpointRule

FRAME = 0.03


def _push(ep: Endpointer, speech: int, silence: int):
    return ep.push(np.r_[np.ones(speech), np.zeros(silence)])


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
    events = ep.push(np.ones(1400))  # 42 s of speech
    assert [e.rule for e in events] == [3, 3]
    assert [e.frame for e in events] == [667, 1334]  # ceil(20 / 0.03) frames each


def test_rules_are_configurable_and_can_be_off() -> None:
    cfg = EndpointConfig(rule2=EndpointRule(True, 0.3, 0.0))
    ep = Endpointer(FRAME, cfg)
    (e,) = _push(ep, 10, 10)
    assert e.rule == 2 and e.frame == 20
    off = Endpointer(FRAME, EndpointConfig(enabled=False))
    assert off.push(np.zeros(2000)) == []
