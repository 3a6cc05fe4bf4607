"""Whisper's per-recording output layouts: ``--format json``, ``--format tsv`` and ``--format txt``
into a folder.

json is the shape ``whisper``'s CLI writes (and ``faster-whisper`` users parse)::

    {"text": "...", "language": "en", "language_probability": 0.98, "duration": 12.345,
     "segments": [{"id": 0, "start": 0.0, "end": 4.52, "text": "...",
                   "words": [{"word": "...", "start": 0.0, "end": 0.31, "probability": 0.97}]}]}

Times are seconds rounded to milliseconds. With ``--emit token_ids`` the document has a
top-level ``token_ids`` list as well (after ``segments``). The segments are the row's (phrases
of its words, strictly increasing: ``oasr.transcribe.segments``), each word placed in the
segment it starts in; a row without segments but with text (no word timings) is one segment
``[0, duration]``.
tsv is whisper's too: a ``start<TAB>end<TAB>text`` header, then one segment a line with
``start``/``end`` in integer milliseconds. txt (``-f txt`` into a folder)
is whisper's plain text: each segment's text on a line of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from oasr.io.output_format import TEXT_FILES

# Rows are oasr.io.writer.OutputRow (not imported: the writer imports this module's user).
OutputRow = Any

__all__ = ["DOCUMENT_RENDERERS", "render_json", "render_tsv", "render_txt", "row_segments"]


def _ms(seconds: Any) -> float:
    return round(float(seconds), 3)


def row_segments(row: OutputRow) -> list[dict[str, Any]]:
    """The row's segments (``start``, ``end``, ``text``, ``words``), words assigned to the
    segment they start in; a row with text but no segments is one segment over its whole
    duration."""
    if row.segments:
        segments = [{"start": s.get("start") or 0.0,
                     "end": s.get("end") if s.get("end") is not None else row.duration or 0.0,
                     "text": (s.get("text") or "").strip(), "words": []}
                    for s in row.segments]
    elif row.text and row.text.strip():
        segments = [{"start": 0.0, "end": row.duration or 0.0, "text": row.text.strip(),
                     "words": []}]
    else:
        return []
    for w in row.words or []:
        home = segments[0]
        for seg in segments:
            if seg["start"] <= w["start"] + 1e-6:
                home = seg
        home["words"].append(w)
    return segments


def render_json(row: OutputRow, emit: tuple[str, ...] | list[str] = ()) -> tuple[str, str]:
    """(the file's text, where the times came from); ``emit``: the row's fields to add
    (``token_ids``) after ``segments``."""
    segments = row_segments(row)
    doc = {
        "text": (row.text or "").strip(),
        "language": row.language,
        "language_probability": row.language_probability,
        "duration": None if row.duration is None else _ms(row.duration),
        "segments": [
            {"id": i, "start": _ms(s["start"]), "end": _ms(s["end"]), "text": s["text"],
             "words": [{"word": w["word"], "start": _ms(w["start"]), "end": _ms(w["end"]),
                        "probability": None if w.get("confidence") is None
                        else round(float(w["confidence"]), 4)}
                       for w in s["words"]]}
            for i, s in enumerate(segments)
        ],
    }
    for name in emit:
        doc[name] = getattr(row, name)
    timings = "segments" if row.segments else ("text" if segments else "none")
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n", timings


def render_tsv(row: OutputRow) -> tuple[str, str]:
    """(the file's text, where the times came from)."""
    lines = ["start\tend\ttext"]
    segments = row_segments(row)
    for s in segments:
        text = " ".join(s["text"].replace("\t", " ").split())
        lines.append(f"{round(float(s['start']) * 1000)}\t{round(float(s['end']) * 1000)}\t{text}")
    timings = "segments" if row.segments else ("text" if segments else "none")
    return "\n".join(lines) + "\n", timings


def render_txt(row: OutputRow) -> tuple[str, str]:
    """(the file's text, where the times came from): whisper's ``.txt``, each segment's text
    on a line of its own; an empty file for a recording without speech."""
    segments = row_segments(row)
    text = "".join(" ".join(s["text"].split()) + "\n" for s in segments)
    timings = "segments" if row.segments else ("text" if segments else "none")
    return text, timings


DOCUMENT_RENDERERS: dict[str, Callable[[OutputRow], tuple[str, str]]] = {
    "json": render_json,
    "tsv": render_tsv,
    TEXT_FILES: render_txt,
}
