"""``-o -``: each finished row as one JSON line on stdout, flushed as it is written.

A stream has nothing to resume from: ``done_ids`` is empty and every row is transcribed.
Progress and the summary go to stderr, so stdout carries only rows (``| jq``-safe).
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from oasr.io.schema import output_columns
from oasr.io.writer import OutputRow, _jsonable

__all__ = ["StdoutWriter", "row_dict"]


def row_dict(row: OutputRow, emit: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The row as the JSONL output writes it: the output columns in order (those ``emit``
    adds after the fixed ones), then passthrough."""
    out = {name: getattr(row, name) for name in output_columns(emit)}
    out.update(row.passthrough)
    return _jsonable(out)


class StdoutWriter:
    """A :class:`~oasr.io.writer.RowWriter` writing JSON lines to ``stream`` (stdout)."""

    def __init__(self, stream: IO[str] | None = None,
                 metadata: dict[str, str] | None = None,
                 emit: tuple[str, ...] | list[str] = ()) -> None:
        self.stream = stream
        self.emit = tuple(emit)
        output_columns(self.emit)  # an unknown column is refused now, not at the first row
        # What a file output would record (RowWriter's surface); a stream has nowhere to put it.
        self.metadata = {str(k): str(v) for k, v in (metadata or {}).items()}

    def _out(self) -> IO[str]:
        return self.stream if self.stream is not None else sys.stdout

    def done_ids(self) -> set[str]:
        return set()

    def previous_metadata(self) -> dict[str, str] | None:
        return None

    def write(self, row: OutputRow) -> None:
        out = self._out()
        out.write(json.dumps(row_dict(row, self.emit), ensure_ascii=False) + "\n")
        out.flush()

    def flush(self) -> None:
        self._out().flush()

    def close(self) -> None:
        self.flush()

    def abort(self) -> None:
        self.flush()
