"""How long a window may generate, and how a runaway is recognised.

A decoder that loses track of the audio loops ("Ladies and gentlemen, ladies and gentlemen, ...")
until the token cap. Two guards, applied per window by ``oasr transcribe``:

* **The cap scales with the audio**: ``generation_cap(seconds) = max(MIN_NEW_TOKENS,
  ceil(seconds * TOKENS_PER_SECOND))``, sent as the request's ``max_new_tokens``; the decode
  family still clamps it to the engine's ``max_new_tokens`` (224) and the decoder's positions.
  12 tokens a second is about twice the fastest read speech (about 4 words, ~5.5 Whisper tokens a
  second, plus timestamp tokens), so a real transcript never reaches it, while a 1 s clip can
  no longer run to 224 tokens.
* **A repetition is reported**: a window that stopped at its cap (``finish_reason="length"``)
  and whose tokens end in one n-gram repeated at least ``MIN_REPEATS`` times, covering at least
  half of what it generated, finishes with ``finish_reason="repetition"``; the run's summary
  counts those rows. (A family with its own guard, aed's ``repetition_guard``, stops such a row
  early with the same reason.)
"""

from __future__ import annotations

import math

from oasr.engine.decode.incremental import trailing_repeats

__all__ = ["MIN_NEW_TOKENS", "MIN_REPEATS", "TOKENS_PER_SECOND", "generation_cap",
           "is_repetition"]

TOKENS_PER_SECOND = 12.0
MIN_NEW_TOKENS = 16
MIN_REPEATS = 3


def generation_cap(seconds: float) -> int:
    """The most tokens a window of ``seconds`` of audio may generate."""
    return max(MIN_NEW_TOKENS, math.ceil(max(seconds, 0.0) * TOKENS_PER_SECOND))


def is_repetition(token_ids: list[int], finish_reason: str | None) -> bool:
    """Whether a window that ran to its cap did so by looping (see the module docstring)."""
    if finish_reason != "length" or len(token_ids) < 2 * MIN_REPEATS:
        return False
    period, copies = trailing_repeats(list(token_ids))
    return copies >= MIN_REPEATS and 2 * period * copies >= len(token_ids)
