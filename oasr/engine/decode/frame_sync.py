"""Families that decode a micro-batch in one ``decode_offline`` call: no incremental state, and
words timed from the encoder's frame clock (``ctc``, ``transducer``, ``tdt``, ``paraformer``).

What they share is their admission: word timings need the frame clock, decoding is
deterministic, and a request asks for at most as many hypotheses as the family keeps.
"""

from __future__ import annotations

from typing import Any

from oasr.engine.decode.base import DecodeStrategy

__all__ = ["FrameSyncStrategy"]


class FrameSyncStrategy(DecodeStrategy):
    """A non-incremental, frame-synchronous family (see the module docstring)."""

    def n_best_limit(self) -> tuple[int, str]:
        """The most hypotheses a request may ask for, and how to get more."""
        return 1, f"decode family {self.name!r} has no beam search"

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return ("offline",) if self.clock is not None else ()

    def validate_options(self, decoding: Any) -> None:
        if decoding.word_timestamps and self.clock is None:
            raise ValueError(
                f"decode family {self.name!r} cannot time words here: seconds per encoder frame "
                "are unknown (the frontend's frame_shift_ms and lfr_n and the encoder's "
                "subsampling_rate must all be declared)"
            )
        if decoding.sampling:
            raise ValueError(f"decode family {self.name!r} decodes deterministically; "
                             "temperature must be 0")
        limit, fix = self.n_best_limit()
        if decoding.n_best is not None and decoding.n_best > limit:
            raise ValueError(f"n_best={decoding.n_best} exceeds beam_size={limit}; {fix}")
        super().validate_options(decoding)
