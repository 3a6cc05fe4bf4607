"""The per-window generation cap and the repetition test."""

from __future__ import annotations

from oasr.transcribe.generation_limits import (
    MIN_NEW_TOKENS,
    TOKENS_PER_SECOND,
    generation_cap,
    is_repetition,
)


def test_the_cap_grows_with_the_audio_from_a_floor() -> None:
    assert generation_cap(0.0) == generation_cap(0.5) == MIN_NEW_TOKENS
    assert generation_cap(1.0) == MIN_NEW_TOKENS  # 12 < 16
    assert generation_cap(10.0) == 10 * TOKENS_PER_SECOND
    assert generation_cap(30.0) == 360  # past the engine's 224: the family clamps it
    assert generation_cap(2.01) == 25  # rounded up


def test_a_loop_to_the_cap_is_a_repetition_a_transcript_is_not() -> None:
    loop = [7, 8, 9, 10] * 4
    assert is_repetition(loop, "length")
    assert not is_repetition(loop, "stop")  # it ended by itself
    assert not is_repetition(list(range(16)), "length")  # long, not looping
    assert not is_repetition([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 5, 5], "length")  # a short tail
    assert not is_repetition([5, 5], "length")
