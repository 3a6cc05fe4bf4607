"""Whisper's temperature fallback: re-decode a window at the next temperature when the result
looks like a hallucination.

A window decoded at ``temperatures[k]`` is decoded again at ``temperatures[k + 1]`` when its
text compresses too well (zlib compression ratio above ``compression_ratio_threshold``: a
repetition loop) or its tokens were unlikely (mean log-probability below
``logprob_threshold``); the last temperature's result stands. Faster-whisper's defaults:
``(0.0, 0.2, 0.4, 0.6, 0.8, 1.0)``, 2.4 and -1.0.

Sampling at a temperature > 0 is seeded per window (``seed`` + row id + window + attempt), so a
rerun draws the same tokens.

The no-speech guard (openai-whisper's and faster-whisper's rule): a window whose
``<|nospeech|>`` probability after ``<|startoftranscript|>`` is above ``no_speech_threshold``
(0.6) *and* whose mean log-probability is below ``logprob_threshold`` is silence: it is not
decoded again at a higher temperature, and the runner drops its text.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from oasr.engine.request import RequestOutput

__all__ = ["FASTER_WHISPER_TEMPERATURES", "TemperatureFallback", "compression_ratio"]

FASTER_WHISPER_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def compression_ratio(text: str) -> float:
    """len(utf-8 bytes) / len(zlib-compressed bytes), as Whisper computes it."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


@dataclass(frozen=True)
class TemperatureFallback:
    temperatures: tuple[float, ...] = (0.0,)
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    seed: int = 0
    no_speech_threshold: float | None = 0.6

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ValueError("--temperature needs at least one value")
        if any(t < 0 for t in self.temperatures):
            raise ValueError(f"temperatures must be >= 0, got {list(self.temperatures)}")

    @property
    def enabled(self) -> bool:
        return len(self.temperatures) > 1

    def failed(self, out: RequestOutput) -> str | None:
        """Why ``out`` should be decoded again (None: it stands)."""
        ratio = compression_ratio(out.text)
        limit = self.compression_ratio_threshold
        if limit is not None and ratio > limit:
            return f"compression ratio {ratio:.2f} > {limit}"
        lp = out.avg_logprob
        if self.logprob_threshold is not None and lp is not None and lp < self.logprob_threshold:
            return f"average log-probability {lp:.2f} < {self.logprob_threshold}"
        return None

    def silent(self, out: RequestOutput) -> bool:
        """Whether ``out`` is a window without speech: its no-speech probability above
        ``no_speech_threshold`` and its mean log-probability below ``logprob_threshold`` (a
        confident transcript stands whatever the no-speech probability). False when either
        threshold is off or the family reports neither figure."""
        p, lp = out.no_speech_prob, out.avg_logprob
        if self.no_speech_threshold is None or self.logprob_threshold is None or p is None:
            return False
        if p <= self.no_speech_threshold:
            return False
        # An empty window (end of text at once) has no mean: nothing says it is confident.
        return lp is None or lp < self.logprob_threshold

    def retry(self, out: RequestOutput, attempt: int) -> bool:
        """Whether the window decoded at ``temperatures[attempt]`` goes again (a silent
        window does not)."""
        return (attempt + 1 < len(self.temperatures) and self.failed(out) is not None
                and not self.silent(out))

    def window_seed(self, row_id: str, window: int, attempt: int) -> int:
        return zlib.crc32(f"{self.seed}\x1f{row_id}\x1f{window}\x1f{attempt}".encode()) & 0x7FFFFFFF
