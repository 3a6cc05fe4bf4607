"""One output row from a recording's decoded pieces: every runner assembles its rows here.

A recording reaches the engine as one or more pieces (windows of the sequential runner, chunks
of the VAD-gated one); each comes back as a :class:`~oasr.engine.request.RequestOutput`. The
row they make:

- ``text``: the pieces' texts joined with spaces (one piece: its text as decoded);
- ``confidence``: the token-weighted mean of the pieces' confidences;
- ``language``: the language most pieces report; ``language_probability`` its probability,
  the mean over the pieces that detected a language (None when none did: given, or an
  English-only model);
- ``finish_reason``: from :data:`FINISH_REASONS` (the output schema's vocabulary): the worst a
  piece reports (``repetition`` before ``length`` before ``stop``), or ``no_speech`` when no
  piece was kept (digital silence, Whisper's no-speech guard, or a speech detector that found
  no speech);
- ``token_ids``: the kept pieces' token ids, in order.

Segments and words are the runner's (each computes them on the recording's clock its own way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oasr.engine.request import RequestOutput
from oasr.io import ManifestRow, OutputRow

__all__ = ["FINISH_REASONS", "NO_SPEECH", "assemble_row", "error_row", "no_speech_row"]

NO_SPEECH = "no_speech"
# Every finish_reason an output row can carry (error rows carry None).
FINISH_REASONS = ("stop", "length", "repetition", NO_SPEECH)
_WORST_FIRST = ("repetition", "length", "stop")


def error_row(row: ManifestRow, message: str, duration: float | None = None) -> OutputRow:
    """The row of a recording that could not be read or decoded."""
    return OutputRow(id=row.id, text=None, words=None, segments=None, confidence=None,
                     duration=duration, language=None, finish_reason=None, error=message,
                     passthrough=row.passthrough)


def no_speech_row(row: ManifestRow, duration: float, word_timestamps: bool,
                  long: bool) -> OutputRow:
    """A recording in which nothing was kept: empty text, ``finish_reason="no_speech"``."""
    return OutputRow(id=row.id, text="", words=[] if word_timestamps else None,
                     segments=[] if long else None, confidence=None, duration=duration,
                     language=None, finish_reason=NO_SPEECH, error=None,
                     passthrough=row.passthrough, token_ids=[])


def assemble_row(row: ManifestRow, outs: Sequence[RequestOutput], *, duration: float,
                 texts: Sequence[str], segments: list[dict[str, Any]] | None,
                 words: list[dict[str, Any]] | None) -> OutputRow:
    """The row of a recording whose kept pieces are ``outs`` (at least one), their texts
    ``texts`` (one per piece; a single piece's text is kept as decoded)."""
    tokens = sum(len(o.token_ids) for o in outs)
    confidence = (sum((o.confidence or 0.0) * len(o.token_ids) for o in outs) / tokens
                  if tokens else None)
    reasons = {o.finish_reason for o in outs}
    reason = next((r for r in _WORST_FIRST if r in reasons), None)
    languages = [o.language for o in outs if o.language]
    language = max(set(languages), key=languages.count) if languages else None
    measured = [dict(o.all_language_probs).get(language) for o in outs if o.all_language_probs]
    measured = [p for p in measured if p is not None]
    text = texts[0] if len(texts) == 1 else " ".join(t for t in texts if t)
    return OutputRow(id=row.id, text=text, words=words, segments=segments, confidence=confidence,
                     duration=duration, language=language,
                     language_probability=(sum(measured) / len(measured) if measured else None),
                     finish_reason=reason, error=None, passthrough=row.passthrough,
                     token_ids=[int(t) for o in outs for t in o.token_ids])
