"""The decode-strategy base declares what the engine calls; every registered family implements
its half (one-shot: ``decode_offline``; incremental: ``begin_offline`` / ``advance`` /
``has_pending`` / ``active_rows``), and a family that does not is refused when registered."""

from __future__ import annotations

import pytest

from oasr.engine.decode.base import DecodeStrategy, check_contract
from oasr.engine.decode.registry import DECODE_STRATEGIES, register_decode_strategy


@pytest.mark.parametrize("family", DECODE_STRATEGIES.names())
def test_every_registered_family_keeps_the_contract(family):
    check_contract(DECODE_STRATEGIES.get(family))


def test_a_family_missing_its_half_is_refused_at_registration():
    class NoDecode(DecodeStrategy):
        pass

    class HalfIncremental(DecodeStrategy):
        incremental = True

        def begin_offline(self, requests, enc, enc_lens):
            return None

    with pytest.raises(TypeError, match="one-shot but does not implement decode_offline"):
        register_decode_strategy("test_no_decode")(NoDecode)
    with pytest.raises(TypeError, match="incremental but does not implement advance, "
                                        "has_pending, active_rows"):
        register_decode_strategy("test_half_incremental")(HalfIncremental)
    assert "test_no_decode" not in DECODE_STRATEGIES.names()


def test_a_bad_consumes_is_refused():
    class Odd(DecodeStrategy):
        consumes = "features"  # type: ignore[assignment]

        def decode_offline(self, enc, enc_lens, requests):
            return []

    with pytest.raises(TypeError, match="consumes"):
        check_contract(Odd)
