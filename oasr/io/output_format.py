"""What every output writer shares: the formats and their extensions, the row, the error, and
the atomic rename. A floor under ``writer`` and ``subtitle_writer`` so neither imports the other
for these."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EMIT_FORMATS",
    "EXTENSIONS",
    "FORMATS",
    "RECORDING_FORMATS",
    "SUBTITLE_FORMATS",
    "TABLE_FORMATS",
    "TEXT_FILES",
    "OutputError",
    "OutputRow",
    "check_emit",
    "fsync_replace",
    "write_part",
]

TABLE_FORMATS = ("parquet", "jsonl", "txt")  # OutputWriter's: one file, one row per input row
SUBTITLE_FORMATS = ("srt", "vtt")
# ``--format txt`` into a folder: whisper's plain text, one ``<id>.txt`` per recording. Not a
# name users pass: oasr.io.format_choice picks it for ``-f txt`` with a folder ``-o``.
TEXT_FILES = "txt-files"
# SubtitleWriter's: one file per recording (json/tsv/text rendered by
# oasr.io.transcript_documents).
RECORDING_FORMATS = SUBTITLE_FORMATS + ("json", "tsv", TEXT_FILES)
# What ``--format`` takes.
FORMATS = TABLE_FORMATS + SUBTITLE_FORMATS + ("json", "tsv")
EXTENSIONS = {
    "parquet": ".parquet",
    "jsonl": ".jsonl",
    "txt": ".txt",
    "srt": ".srt",
    "vtt": ".vtt",
    "json": ".json",
    "tsv": ".tsv",
    TEXT_FILES: ".txt",
}

# The formats with a place for the columns ``--emit`` adds: Parquet's columns, JSONL's fields,
# whisper's json document (a top-level key). txt, tsv, srt and vtt hold text only.
EMIT_FORMATS = ("parquet", "jsonl", "json")


class OutputError(RuntimeError):
    """The output cannot be written or an existing one cannot be resumed from."""


def check_emit(fmt: str, emit: tuple[str, ...] | list[str]) -> None:
    """Refuse ``emit`` (columns to add) for a format that has no place for them."""
    if emit and fmt not in EMIT_FORMATS:
        name = "txt" if fmt == TEXT_FILES else fmt
        raise OutputError(
            f"--emit {','.join(emit)}: a {name} output holds text only, with no place for "
            f"{'that column' if len(emit) == 1 else 'those columns'}; write "
            f"{', '.join(EMIT_FORMATS)} (-o's extension or --format), or drop --emit")


@dataclass
class OutputRow:
    """One finished row. ``words``: dicts with word/start/end/confidence (seconds from the start
    of the recording); ``segments``: dicts with start/end/text; ``error`` None when fine."""

    id: str
    text: str | None = None
    words: list[dict[str, Any]] | None = None
    segments: list[dict[str, Any]] | None = None
    confidence: float | None = None
    duration: float | None = None
    language: str | None = None
    # The probability of ``language`` as the model detected it (None when given, or
    # English-only).
    language_probability: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    passthrough: dict[str, Any] = field(default_factory=dict)
    # Shown to the user (e.g. "the audio sounds like Spanish"), not written to the output.
    warnings: list[str] = field(default_factory=list)
    # The decoded token ids (every kept piece's, in order); written only where asked for
    # (``--emit token_ids``), always on the API's result. None on error rows.
    token_ids: list[int] | None = None
    # Detected speech seconds covered by transcribed words / detected speech seconds
    # (oasr.transcribe.coverage); None where not measured (no word timings, --coverage-vad none).
    coverage: float | None = None


def fsync_replace(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` over ``final`` and make the rename durable (fsync of the folder).
    Never over a device, FIFO or socket: the rename would replace the node itself (as root,
    ``/dev/null``)."""
    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OutputError(f"{final} is not a regular file; oasr never writes over a device, "
                          "FIFO or socket: choose a file path for the output")
    os.replace(tmp, final)
    try:
        fd = os.open(final.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself has happened
    finally:
        os.close(fd)


def write_part(table: Any, final: Path) -> None:
    """Write the Arrow ``table`` as the Parquet file ``final``, whole or not at all: into
    ``.<name>.tmp-<pid>`` beside it, fsynced, then renamed (a kill leaves only the temp file,
    which :mod:`oasr.io.stale_temp` removes later). Raises OSError as the disk does."""
    import pyarrow.parquet as pq

    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
