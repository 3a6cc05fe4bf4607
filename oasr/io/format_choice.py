"""Which output format ``oasr transcribe -o OUT [-f FMT]`` writes.

``-f`` wins when given; otherwise ``-o``'s extension decides (``out.jsonl`` -> jsonl,
``talk.srt`` -> srt, ...), and a folder or an unknown extension means Parquet. A ``-f`` that
contradicts the extension is an error rather than a file whose name lies about its contents.
``-o -`` streams JSONL to stdout.

``txt`` has two layouts: a file (``-o hyp.txt``) holds every recording, one ``id<TAB>text``
line each (what ``oasr wer`` reads); a folder (``-o out/ -f txt``) holds whisper's plain text,
one ``<id>.txt`` per recording (the internal format ``txt-files``), as ``whisper
--output_format txt --output_dir out`` writes.
"""

from __future__ import annotations

import os
from pathlib import Path

from oasr.io.output_format import TEXT_FILES
from oasr.io.writer import _EXTENSIONS, FORMATS, OutputError

__all__ = ["STDOUT", "format_of_extension", "infer_format"]

STDOUT = "-"
_BY_EXTENSION = {ext: fmt for fmt, ext in _EXTENSIONS.items() if fmt in FORMATS} | {
    ".ndjson": "jsonl"}


def _is_folder(output: str) -> bool:
    return output.endswith(("/", os.sep)) or Path(output).is_dir()


def format_of_extension(output: str) -> str | None:
    """The format ``output``'s extension names, or None (a folder, or no known extension)."""
    if _is_folder(output):
        return None
    return _BY_EXTENSION.get(Path(output).suffix.lower())


def infer_format(output: str, fmt: str | None) -> str:
    """The format to write; raises OutputError on an unknown ``fmt`` or a contradiction."""
    if fmt is not None and fmt not in FORMATS:
        raise OutputError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if output == STDOUT:
        if fmt not in (None, "jsonl"):
            raise OutputError(f"-o - streams JSONL rows to stdout; --format {fmt} needs a file "
                              "or folder")
        return "jsonl"
    named = format_of_extension(output)
    if fmt is None:
        return named or "parquet"
    if fmt == "txt" and _is_folder(output):
        return TEXT_FILES
    if named is not None and named != fmt:
        suffix = Path(output).suffix
        raise OutputError(
            f"-o {output} ends with {suffix} ({named}) but --format is {fmt}: drop --format to "
            f"write {named}, or name the output *{_EXTENSIONS[fmt]}"
        )
    return fmt
