"""Per-axis registration helpers and their declared checks."""

from __future__ import annotations

import pytest

from oasr.engine.decode import DecodeStrategy, build_decode_strategy, register_decode_strategy
from oasr.engine.decode.registry import DECODE_STRATEGIES
from oasr.models.interfaces import MissingCapabilityError, require_capability
from oasr.models.whisper.config import WhisperConfig
from oasr.vad import VADS, SpeechDetector, VadSpec, register_vad


class _Decoder:
    def prefill(self): ...
    def step(self): ...
    def select(self): ...
    def forced_logits(self): ...


class _AedModel:
    decoder = _Decoder()
    config = WhisperConfig()

    def encode_offline(self): ...


def test_require_capability_names_missing_members():
    class HalfModel:
        config = WhisperConfig()

        def encode_offline(self): ...

    with pytest.raises(MissingCapabilityError) as err:
        require_capability(HalfModel(), "aed")
    msg = str(err.value)
    for member in ("decoder.prefill", "decoder.step", "decoder.select"):
        assert member in msg
    assert "encode_offline" not in msg
    require_capability(_AedModel(), "aed")  # complete: no error


def test_unknown_capability_family_lists_the_declared_ones():
    with pytest.raises(KeyError, match="aed"):
        require_capability(_AedModel(), "no-such-family")


def test_build_decode_strategy_checks_capability_at_construction():
    @register_decode_strategy("test-aed")
    class TestAed(DecodeStrategy):
        capability = "aed"
        incremental = True

        def begin_offline(self, requests, enc, enc_lens):
            return None

        def advance(self, budget):
            return []

        def has_pending(self):
            return False

        @property
        def active_rows(self):
            return 0

    try:
        strat = build_decode_strategy("test-aed", _AedModel())
        assert isinstance(strat, TestAed) and strat.name == "test-aed"
        with pytest.raises(MissingCapabilityError):
            build_decode_strategy("test-aed", object())
    finally:
        DECODE_STRATEGIES.unregister("test-aed")


def test_register_decode_strategy_refuses_non_strategies():
    with pytest.raises(TypeError):
        register_decode_strategy("bogus")(object)


def test_vad_spec_refuses_presegment_from_asr_signal():
    with pytest.raises(ValueError, match="cannot pre-segment"):
        VadSpec("ctc-blank", SpeechDetector, consumes="log_probs", modes=("presegment",))
    spec = register_vad(VadSpec("test-energy", SpeechDetector, modes=("presegment", "stream")))
    try:
        assert VADS.get("test-energy") is spec
    finally:
        VADS.unregister("test-energy")
