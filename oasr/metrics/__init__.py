"""Scoring transcripts: corpus WER/CER (``wer``), transcript tables (``tables``), gates (``gate``).

Importing this package is cheap: jiwer, the Whisper normalizers and pyarrow load on first use.
"""

from oasr.metrics.wer import (
    NORMALIZERS,
    EmptyReferenceError,
    UtteranceScore,
    WerResult,
    get_normalizer,
    normalizer_names,
    score,
)

__all__ = [
    "NORMALIZERS",
    "EmptyReferenceError",
    "UtteranceScore",
    "WerResult",
    "get_normalizer",
    "normalizer_names",
    "score",
]
