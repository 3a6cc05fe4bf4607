"""The speech-detector axis: declarations, registration and construction."""

import pytest

from oasr.vad import (
    VADS,
    MissingWeightsError,
    SpeechDetector,
    VadSpec,
    build_detector,
    register_vad,
)


class _Weighted(SpeechDetector):
    def __init__(self, weights, **kwargs):
        self.weights = weights

    @staticmethod
    def find_weights(model_dir):
        return model_dir


def test_asr_derived_detector_cannot_claim_presegment_at_registration():
    with pytest.raises(ValueError, match="cannot pre-segment"):
        register_vad(VadSpec("bad", SpeechDetector, consumes="log_probs",
                             modes=("presegment", "posthoc")))
    assert "bad" not in VADS


def test_unknown_mode_and_stateful_without_stream_are_refused():
    with pytest.raises(ValueError, match="unknown modes"):
        VadSpec("x", SpeechDetector, modes=("segment",))
    with pytest.raises(ValueError, match="stateful"):
        VadSpec("x", SpeechDetector, modes=("presegment",), stateful=True)


def test_register_vad_takes_a_spec():
    with pytest.raises(TypeError):
        register_vad(SpeechDetector)


def test_needs_weights_fails_at_construction_naming_the_fix():
    register_vad(VadSpec("test-weighted", _Weighted, needs_weights=True,
                         weights_hint="pass --vad-model-dir"))
    try:
        with pytest.raises(MissingWeightsError, match="--vad-model-dir"):
            build_detector("test-weighted")
        assert build_detector("test-weighted", model_dir="/w").weights == "/w"
    finally:
        VADS.unregister("test-weighted")


def test_mode_is_checked_against_the_declared_roles():
    with pytest.raises(ValueError, match="cannot serve mode 'presegment'"):
        build_detector("ctc_blank", mode="presegment")


def test_builtin_detectors_are_registered_with_their_roles():
    assert {"silero", "fsmn", "ctc_blank"} <= set(VADS.names())
    assert VADS.get("silero").modes == ("presegment", "stream", "posthoc")
    assert VADS.get("ctc_blank").consumes == "log_probs"
    assert "presegment" not in VADS.get("ctc_blank").modes
    assert VADS.get("ctc_blank").min_silence_floor_ms > 0
