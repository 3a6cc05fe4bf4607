"""Reading id-keyed transcript tables (Parquet, JSONL, TSV) for scoring.

The format is chosen by the file extension, never sniffed from content: ``.parquet`` / ``.pq``,
``.jsonl`` / ``.ndjson`` (one JSON object a line), ``.tsv`` (a header row of column names, then
tab-separated rows, no quoting), ``.txt`` (``oasr transcribe -f txt``'s layout: ``id<TAB>text`` a
line, no header, ``ERROR: message`` as the text of an error row; columns ``id``, ``text``,
``error``). Ids are compared as strings, so an integer id in Parquet joins
the same id written as text in a TSV. Text files are read in the encoding the caller names
(UTF-8 by default, a byte-order mark skipped); a byte that is not of it is a ``TableError``
naming the line and the byte. Parquet strings are UTF-8 by definition.

Every error names the file and says what to change.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FORMATS",
    "MissingColumnError",
    "TableError",
    "Transcripts",
    "read_transcripts",
    "table_format",
]

FORMATS: dict[str, str] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".tsv": "tsv",
    ".txt": "txt",
}
# The txt layout's error marker (oasr.io.writer writes it).
_TXT_ERROR_PREFIX = "ERROR: "

_LIST_LIMIT = 10


class TableError(ValueError):
    """A transcript file cannot be read as asked; the message names the file and the fix."""


class MissingColumnError(TableError):
    """A required column is absent. ``role`` is ``"id"`` or ``"text"``."""

    def __init__(self, path: Path, column: str, available: list[str], role: str,
                 where: str = "") -> None:
        self.path = path
        self.column = column
        self.available = available
        self.role = role
        listing = ", ".join(available) if available else "none"
        at = f" ({where})" if where else ""
        super().__init__(
            f"{path}: no {role} column {column!r}{at}; available columns: {listing}"
        )


@dataclass
class Transcripts:
    """One file's rows. ``texts`` keeps file order; ``errors`` maps id to its error message."""

    path: Path
    texts: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)


def table_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        valid = ", ".join(sorted(FORMATS))
        raise TableError(
            f"{path}: cannot tell the format from the extension {path.suffix or '(none)'!r}; "
            f"rename it to one of {valid}"
        )
    return fmt


def _short_list(items: list[str]) -> str:
    shown = ", ".join(items[:_LIST_LIMIT])
    more = len(items) - _LIST_LIMIT
    return f"{shown} (and {more} more)" if more > 0 else shown


def read_transcripts(
    path: str | Path,
    *,
    id_column: str = "id",
    text_column: str = "text",
    error_column: str | None = None,
    allow_null_text: bool = False,
    encoding: str = "utf-8",
) -> Transcripts:
    """Read ``id_column`` and ``text_column`` (and ``error_column`` when the file has it);
    JSONL, TSV and text files in ``encoding`` (a Python codec name).

    A row whose error value is null or an empty string has no error. A null text is an error
    unless ``allow_null_text``, in which case it reads as the empty string.

    Raises:
        TableError: the file is missing or unreadable, not in ``encoding``, has duplicate or
            null ids, null text (unless allowed) or text that is not a string.
        MissingColumnError: the id or the text column is absent.
    """
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    if fmt == "parquet":
        columns, rows = _parquet_rows(path, id_column, text_column, error_column)
    else:
        reader = {"jsonl": _jsonl_rows, "tsv": _tsv_rows, "txt": _txt_rows}[fmt]
        columns, rows = reader(path, _read_text(path, encoding), id_column, text_column,
                               error_column)

    texts: dict[str, str] = {}
    errors: dict[str, str] = {}
    duplicates: list[str] = []
    null_text: list[str] = []
    for where, rid, text, err in rows:
        if rid is None:
            raise TableError(f"{path}: {where} has a null {id_column!r}; every row needs an id")
        rid = str(rid)
        if rid in texts:
            duplicates.append(rid)
            continue
        if text is None:
            if not allow_null_text:
                null_text.append(rid)
            text = ""
        elif not isinstance(text, str):
            raise TableError(
                f"{path}: {where} has a {type(text).__name__} in text column {text_column!r}; "
                "point the text option at a column of strings"
            )
        texts[rid] = text
        if err is not None and err != "":
            errors[rid] = str(err)
    if duplicates:
        raise TableError(
            f"{path}: {len(duplicates)} duplicate ids in {id_column!r}: "
            f"{_short_list(duplicates)}; each id must appear once"
        )
    if null_text:
        raise TableError(
            f"{path}: {len(null_text)} rows have a null {text_column!r}: "
            f"{_short_list(null_text)}; fill them (an empty string is allowed) or drop the rows"
        )
    return Transcripts(path=path, texts=texts, errors=errors, columns=columns)


_Row = tuple[str, Any, Any, Any]  # (where, id, text, error)


def _read_text(path: Path, encoding: str) -> str:
    """The whole file decoded; a byte-order mark of UTF-8 dropped."""
    try:
        codec = codecs.lookup(encoding)
    except LookupError:
        raise TableError(f"unknown encoding {encoding!r}; pass a Python codec name such as "
                         "utf-8, latin-1, cp1252 or utf-16") from None
    try:
        data = path.read_bytes()
    except OSError as e:
        from oasr.io.os_reason import reason

        raise TableError(f"{path}: cannot be read ({reason(e, path)})") from None
    name = "utf-8-sig" if codec.name == "utf-8" else codec.name
    try:
        return data.decode(name)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        byte = data[e.start:e.start + 1].hex()
        raise TableError(
            f"{path}: line {line} is not {codec.name} (byte 0x{byte} at offset {e.start}); "
            f"pass --encoding with the file's encoding (e.g. --encoding latin-1 or cp1252)"
        ) from None


def _check_columns(path: Path, columns: list[str], id_column: str, text_column: str,
                   where: str = "") -> None:
    for column, role in ((id_column, "id"), (text_column, "text")):
        if column not in columns:
            raise MissingColumnError(path, column, columns, role, where)


def _parquet_rows(path: Path, id_column: str, text_column: str,
                  error_column: str | None) -> tuple[list[str], Iterator[_Row]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        from oasr.io.os_reason import reason

        raise TableError(f"{path}: not a readable Parquet file ({reason(e, path)})") from e
    columns = list(schema.names)
    _check_columns(path, columns, id_column, text_column)
    text_type = schema.field(text_column).type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)
            or pa.types.is_null(text_type)):
        raise TableError(
            f"{path}: text column {text_column!r} holds {text_type}, not strings; "
            "point the text option at a string column"
        )
    wanted = [id_column, text_column]
    has_error = error_column is not None and error_column in columns
    if has_error:
        wanted.append(error_column)
    table = pq.read_table(path, columns=list(dict.fromkeys(wanted)))
    ids = table.column(id_column).to_pylist()
    texts = table.column(text_column).to_pylist()
    errs = table.column(error_column).to_pylist() if has_error else [None] * len(ids)

    def rows() -> Iterator[_Row]:
        for n, (rid, text, err) in enumerate(zip(ids, texts, errs, strict=True)):
            yield f"row {n}", rid, text, err

    return columns, rows()


def _jsonl_rows(path: Path, text: str, id_column: str, text_column: str,
                error_column: str | None) -> tuple[list[str], Iterator[_Row]]:
    seen: list[str] = []
    rows: list[_Row] = []
    with io.StringIO(text, newline=None) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"line {lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TableError(f"{path}: {where} is not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict):
                raise TableError(f"{path}: {where} is not a JSON object; JSONL needs one a line")
            for key in obj:
                if key not in seen:
                    seen.append(key)
            _check_columns(path, list(obj), id_column, text_column, where)
            err = obj.get(error_column) if error_column is not None else None
            rows.append((where, obj[id_column], obj[text_column], err))
    return seen, iter(rows)


def _tsv_rows(path: Path, text: str, id_column: str, text_column: str,
              error_column: str | None) -> tuple[list[str], Iterator[_Row]]:
    with io.StringIO(text, newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header: list[str] | None = None
        rows: list[_Row] = []
        for fields in reader:
            if header is None:
                header = fields
                _check_columns(path, header, id_column, text_column, "header row")
                i_id, i_text = header.index(id_column), header.index(text_column)
                i_err = (header.index(error_column)
                         if error_column is not None and error_column in header else None)
                continue
            if not fields or fields == [""]:
                continue
            where = f"line {reader.line_num}"
            if len(fields) != len(header):
                raise TableError(
                    f"{path}: {where} has {len(fields)} tab-separated fields, the header has "
                    f"{len(header)}; text must not contain tabs"
                )
            err = fields[i_err] if i_err is not None else None
            rows.append((where, fields[i_id], fields[i_text], err))
    return header or [], iter(rows)


def _txt_rows(path: Path, text: str, id_column: str, text_column: str,
              error_column: str | None) -> tuple[list[str], Iterator[_Row]]:
    columns = ["id", "text", "error"]
    _check_columns(path, columns, id_column, text_column, "the txt layout id<TAB>text")
    rows: list[_Row] = []
    with io.StringIO(text, newline=None) as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            rid, sep, body = line.partition("\t")
            if not sep:
                raise TableError(f"{path}: line {number} has no tab; the txt layout is "
                                 "id<TAB>text, one row a line")
            err = body[len(_TXT_ERROR_PREFIX):] if body.startswith(_TXT_ERROR_PREFIX) else None
            text = "" if err is not None else body
            values = {"id": rid, "text": text, "error": err}
            rows.append((f"line {number}", values[id_column], values[text_column],
                         values.get(error_column) if error_column is not None else None))
    return columns, iter(rows)
