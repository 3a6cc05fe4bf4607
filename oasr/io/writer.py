"""The output of ``oasr transcribe``: crash-safe, resumable, one row per input row.

Rows are buffered and every ``flush_rows`` rows, or ``flush_seconds`` after the oldest buffered
row finished, written as one Parquet part file into ``<out>.parts/`` (tmp file +
``os.replace``, so a part is whole or absent even after SIGKILL).
``close()`` merges the previous final output (if any) and all parts into ``<out>.tmp-<pid>``,
keeping the newest row of each id, and renames it over ``<out>``; only then are the parts
removed. A crash at any point leaves either the old output or the new one, plus parts that a
rerun folds in: ``done_ids()`` tells the engine what to skip. A writer killed mid-rename leaves
``<out>.tmp-<pid>`` (or a part's temp file); opening a writer removes those of dead pids.
One process writes one output: ``oasr transcribe`` holds :class:`oasr.io.lock.OutputLock` on it.

Parts are Parquet whatever the final format: they keep types, and the merge streams them in
record batches, so memory holds the id table, not the rows.

``emit`` names the columns a run adds (``--emit token_ids``; :data:`oasr.io.schema.
EMITTED_FIELDS`), after the fixed columns; parquet and jsonl carry them, txt refuses them. An
output records them (metadata ``emit``, absent when none), and a resume must ask for the same
ones: rows with and without a column do not mix in one output.

Every file it writes says it is ours (:mod:`oasr.io.output_target`): parts and a Parquet output
carry ``oasr_output: transcripts`` in their key-value metadata, a JSONL or text output a
sidecar ``<out>.oasr.json`` (written before the output appears); opening a writer on a path
holding anything else is refused. A write that fails (a full disk, an I/O error) is one
:class:`OutputError` naming the file and what is kept on disk; the writer then writes nothing
more, and ``abort()`` after it is quiet, so the failure is reported once.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.io.os_reason import reason
from oasr.io.output_format import (
    EXTENSIONS,
    FORMATS,
    RECORDING_FORMATS,
    SUBTITLE_FORMATS,
    TABLE_FORMATS,
    OutputError,
    OutputRow,
    check_emit,
    fsync_replace,
    write_part,
)
from oasr.io.output_target import (
    KIND_KEY,
    TRANSCRIPTS,
    check_output_target,
    read_sidecar,
    write_sidecar,
)
from oasr.io.schema import conform_table, output_schema, unify_schemas
from oasr.io.stale_temp import remove_stale_temps

if TYPE_CHECKING:
    from oasr.io.subtitles import CueOptions

__all__ = [
    "FORMATS",
    "RECORDING_FORMATS",
    "SUBTITLE_FORMATS",
    "TABLE_FORMATS",
    "OutputError",
    "OutputRow",
    "OutputWriter",
    "RowWriter",
    "open_writer",
    "resolve_output_path",
    "rows_to_table",
]

_EXTENSIONS = EXTENSIONS
_PART_PREFIX = "part-"
# Rows per Parquet row group in the final file: parts are small (flush_rows), the merged file
# should not inherit their tiny row groups.
ROW_GROUP_ROWS = 2048
_ERROR_PREFIX = "ERROR: "
_SRC_BITS = 40
# A part is written at least this often while rows finish: what a kill -9 can lose.
FLUSH_SECONDS = 3.0
# The metadata key naming the columns ``--emit`` added (comma-separated); absent when none.
EMIT_KEY = "emit"


def resolve_output_path(
    out: str, inputs: list[str], fmt: str, shard: tuple[int, int] | None = None
) -> Path:
    """``out`` itself, or, when ``out`` is a folder (exists, or ends with a separator),
    ``<out>/<name>.<ext>``: name = the stem of a single input file, the name of a single input
    folder, else ``transcripts``; ``.shard-i-of-n`` added when sharding so the processes of one
    run do not share a file. A name that would overwrite an input gets ``.oasr`` added.

    srt/vtt: ``out`` itself, a folder for one file per recording unless it ends with the
    format's extension (then one recording's file); see
    :func:`oasr.io.subtitle_writer.subtitle_output_path`."""
    if fmt not in _EXTENSIONS:
        raise OutputError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in RECORDING_FORMATS:
        from oasr.io.subtitle_writer import subtitle_output_path

        return subtitle_output_path(out, fmt)
    is_dir = out.endswith(("/", os.sep)) or Path(out).is_dir()
    if not is_dir:
        return Path(out)
    name = "transcripts"
    if len(inputs) == 1:
        single = Path(inputs[0])
        if single.is_file():
            name = single.stem
        elif single.is_dir():
            name = single.resolve().name or name
    if shard is not None:
        name += f".shard-{shard[0]}-of-{shard[1]}"
    path = Path(out) / f"{name}{_EXTENSIONS[fmt]}"
    taken = {os.path.abspath(p) for p in inputs}
    if os.path.abspath(path) in taken:
        path = path.with_name(f"{name}.oasr{_EXTENSIONS[fmt]}")
    return path


def _jsonable(value: Any) -> Any:
    """A value json.dumps writes as strict JSON (NaN -> null, bytes -> base64, dates -> ISO)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


def _one_line(text: str) -> str:
    return " ".join(text.split("\n")).replace("\t", " ").replace("\r", " ")


def _txt_line(row: dict[str, Any]) -> str:
    body = _ERROR_PREFIX + row["error"] if row.get("error") else (row.get("text") or "")
    return f"{_one_line(str(row['id']))}\t{_one_line(body)}\n"


class OutputWriter:
    """Writes :class:`OutputRow` s to ``path`` in ``fmt``; see the module docstring.

    ``metadata`` becomes the Parquet file's key-value metadata (and each part's).
    ``passthrough_schema`` (from :func:`oasr.io.manifest.passthrough_schema`) keeps the
    manifest's exact passthrough types; without it types are inferred per part. ``emit``: the
    columns added after the fixed ones (``("token_ids",)``); not for txt.
    """

    def __init__(
        self,
        path: str | Path,
        fmt: str = "parquet",
        metadata: dict[str, str] | None = None,
        retry_errors: bool = False,
        flush_rows: int = 64,
        passthrough_schema: pa.Schema | None = None,
        flush_seconds: float = FLUSH_SECONDS,
        emit: tuple[str, ...] | list[str] = (),
    ) -> None:
        if fmt not in TABLE_FORMATS:
            raise OutputError(
                f"OutputWriter writes {', '.join(TABLE_FORMATS)}, not {fmt!r}; open_writer() "
                f"picks the writer of any of {', '.join(FORMATS)}"
            )
        if flush_rows < 1:
            raise OutputError(f"flush_rows must be >= 1, got {flush_rows}")
        if not flush_seconds > 0:
            raise OutputError(f"flush_seconds must be > 0, got {flush_seconds}")
        check_emit(fmt, emit)
        self.emit = tuple(emit)
        self.path = Path(path)
        self.fmt = fmt
        check_output_target(self.path, fmt)
        self.metadata = {KIND_KEY: TRANSCRIPTS,
                         **{str(k): str(v) for k, v in (metadata or {}).items()}}
        if self.emit:
            self.metadata[EMIT_KEY] = ",".join(self.emit)
        self.retry_errors = retry_errors
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.passthrough_schema = passthrough_schema
        # Refuses colliding names and unknown emitted columns now, not at the first flush.
        output_schema(passthrough_schema, self.emit)
        self.parts_dir = Path(f"{self.path}.parts")
        self._buffer: list[OutputRow] = []
        self._buffered_since = 0.0  # monotonic time the oldest buffered row arrived
        self._next_part: int | None = None
        self._closed = False
        self._failed: OutputError | None = None  # the write that failed, reported once
        self._emit_checked = False
        remove_stale_temps(self.path.parent, f"{self.path.name}.tmp-")
        remove_stale_temps(self.parts_dir, f".{_PART_PREFIX}")

    # -------------------------------------------------------------- reading what exists

    def _parts(self) -> list[Path]:
        if not self.parts_dir.is_dir():
            return []
        found = []
        for p in self.parts_dir.iterdir():
            stem = p.name[len(_PART_PREFIX) : -len(".parquet")]
            if p.name.startswith(_PART_PREFIX) and p.name.endswith(".parquet") and stem.isdigit():
                found.append((int(stem), p))
        return [p for _, p in sorted(found)]

    def _final_records(self) -> Iterator[tuple[str, bool, str | None]]:
        """(id, has error, verbatim line or None) of each row of the existing final output."""
        if not self.path.is_file():
            return
        label = f"existing output {self.path}"
        if self.fmt == "parquet":
            try:
                pf = pq.ParquetFile(self.path)
                for batch in pf.iter_batches(columns=["id", "error"]):
                    ids, errors = batch.column(0).to_pylist(), batch.column(1).to_pylist()
                    for i, e in zip(ids, errors, strict=True):
                        yield i, e is not None, None
            except (pa.ArrowException, KeyError, IndexError) as exc:
                raise OutputError(
                    f"{label} is not an oasr Parquet output ({exc}); remove it or "
                    f"choose another output path"
                ) from exc
            return
        with open(self.path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                if not line.endswith("\n"):
                    line += "\n"
                if self.fmt == "txt":
                    row_id, _, body = line.rstrip("\n").partition("\t")
                    yield row_id, body.startswith(_ERROR_PREFIX), line
                    continue
                try:
                    obj = json.loads(line)
                    yield str(obj["id"]), obj.get("error") is not None, line
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise OutputError(
                        f"{label} line {number} is not an oasr JSONL row ({exc}); "
                        f"remove it or choose another output path"
                    ) from exc

    def _part_records(self, part: Path) -> Iterator[tuple[str, bool]]:
        try:
            # ParquetFile, not read_table: that imports pyarrow.dataset, and with it pandas.
            with pq.ParquetFile(part) as pf:
                table = pf.read(columns=["id", "error"])
        except pa.ArrowException as exc:
            raise OutputError(
                f"unreadable part {part} ({exc}); remove it to redo its rows"
            ) from exc
        ids, errors = table.column(0).to_pylist(), table.column(1).to_pylist()
        for i, e in zip(ids, errors, strict=True):
            yield i, e is not None

    def done_ids(self) -> set[str]:
        """Ids finished by an earlier run (final output and leftover parts) or by this writer;
        an id whose newest row is an error counts as not done when ``retry_errors``."""
        self._check_emit()
        state: dict[str, bool] = {}
        for row_id, has_error, _ in self._final_records():
            state[row_id] = has_error
        for part in self._parts():
            for row_id, has_error in self._part_records(part):
                state[row_id] = has_error
        for row in self._buffer:
            state[row.id] = row.error is not None
        return {i for i, err in state.items() if not (err and self.retry_errors)}

    def previous_metadata(self) -> dict[str, str] | None:
        """The metadata an earlier run recorded (newest part, else the final Parquet file), to
        warn when resuming with another model or options; None when there is none. Raises
        OutputError when that run added other columns (``emit``) than this writer does."""
        self._check_emit()
        return self._previous_metadata()

    def _check_emit(self) -> None:
        """Refuse to resume an output started with other ``--emit`` columns (once)."""
        if self._emit_checked:
            return
        try:
            previous = self._previous_metadata()
        except (pa.ArrowException, OSError):
            previous = None  # an unreadable output or part: reported by what reads its rows
        self._emit_checked = True
        if previous is None:
            return
        before = tuple(e for e in previous.get(EMIT_KEY, "").split(",") if e)
        if before != self.emit:
            then = f"with --emit {','.join(before)}" if before else "without --emit"
            now = f"--emit {','.join(before)}" if before else "no --emit"
            raise OutputError(
                f"{self.path} was started {then}; a resume must add the same columns: rerun "
                f"with {now}, or start it over with --overwrite")

    def _previous_metadata(self) -> dict[str, str] | None:
        parts = self._parts()
        if parts:
            source: Path | None = parts[-1]
        elif self.fmt == "parquet" and self.path.is_file():
            source = self.path
        else:
            side = read_sidecar(self.path) if self.path.is_file() else None
            return None if side is None else {k: v for k, v in side.items() if k != KIND_KEY}
        raw = pq.read_schema(source).metadata or {}
        return {k.decode(): v.decode() for k, v in raw.items()
                if not k.startswith(b"ARROW:") and k != KIND_KEY.encode()}

    # -------------------------------------------------------------- writing

    def write(self, row: OutputRow) -> None:
        """Buffer ``row``; ``flush_rows`` rows, or rows buffered ``flush_seconds``, become one
        part file, so a ``kill -9`` loses at most that much finished work."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise OutputError(f"writer for {self.path} is closed")
        now = time.monotonic()
        if not self._buffer:
            self._buffered_since = now
        self._buffer.append(row)
        if (len(self._buffer) >= self.flush_rows
                or now - self._buffered_since >= self.flush_seconds):
            self.flush()

    def flush_if_due(self) -> None:
        """Flush when the oldest buffered row has waited ``flush_seconds``: called while a long
        recording decodes, so rows finished before it do not wait for the next row."""
        if self._buffer and time.monotonic() - self._buffered_since >= self.flush_seconds:
            self.flush()

    def _rows_to_table(self, rows: list[OutputRow]) -> pa.Table:
        return rows_to_table(rows, self.passthrough_schema, self.metadata, self.emit)

    def flush(self) -> None:
        """Write the buffered rows as the next part file (atomically)."""
        if self._failed is not None:
            raise self._failed
        if not self._buffer:
            return
        self._check_emit()
        table = self._rows_to_table(self._buffer)
        final = None
        try:
            self.parts_dir.mkdir(parents=True, exist_ok=True)
            if self._next_part is None:
                existing = self._parts()
                self._next_part = (int(existing[-1].name[len(_PART_PREFIX) : -8]) + 1
                                   if existing else 1)
            final = self.parts_dir / f"{_PART_PREFIX}{self._next_part:06d}.parquet"
            write_part(table, final)
        except OSError as err:
            raise self._fail(final or self.parts_dir, err,
                             f"the {len(self._buffer)} rows finished since were not written "
                             "and are redone by a rerun") from None
        self._next_part += 1
        self._buffer.clear()

    def _fail(self, where: Path, err: OSError, lost: str) -> OutputError:
        """The one error a failed write reports: the file, why, and what is kept on disk.
        The writer writes nothing more after it."""
        parts = self._parts()
        try:
            rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        except (pa.ArrowException, OSError):
            rows = None
        kept = []
        if parts:
            held = (f"{rows} finished row{'s' * (rows != 1)}" if rows is not None
                    else "the finished rows")
            kept.append(f"{held} in {len(parts)} part file{'s' * (len(parts) != 1)} in "
                        f"{self.parts_dir}")
        if self.path.is_file():
            kept.append(f"the earlier output {self.path} as it was")
        why = reason(err, where)
        self._failed = OutputError(
            f"cannot write {where}: {why}; kept: {' and '.join(kept) or 'nothing yet'}; "
            f"{lost}; fix the cause (free space) and rerun the same command to resume")
        return self._failed

    def abort(self) -> None:
        """Flush the buffer as a part and stop, without merging: a rerun resumes from parts.
        After a failed write it only stops (that failure was already raised)."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.flush()
        finally:
            self._closed = True

    def close(self) -> None:
        """Merge the earlier output and all parts into ``path`` atomically; remove the parts."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            return
        self.flush()
        self._closed = True
        parts = self._parts()
        if not parts and self.path.is_file():
            shutil.rmtree(self.parts_dir, ignore_errors=True)  # only stale temp files were left
            return
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.fmt != "parquet":
                write_sidecar(self.path, TRANSCRIPTS, self.metadata)
            with open(
                tmp,
                "wb" if self.fmt == "parquet" else "w",
                **({} if self.fmt == "parquet" else {"encoding": "utf-8"}),
            ) as f:
                self._merge(parts, f)
                f.flush()
                os.fsync(f.fileno())
            fsync_replace(tmp, self.path)
        except OSError as err:
            raise self._fail(self.path, err, "nothing was lost") from None
        finally:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(self.parts_dir, ignore_errors=True)

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -------------------------------------------------------------- merging

    def _winners(self, parts: list[Path]) -> dict[str, int]:
        """id -> (source << _SRC_BITS | row) of its newest row; source 0 is the final file."""
        winners: dict[str, int] = {}
        for k, (row_id, _, _) in enumerate(self._final_records()):
            winners[row_id] = k
        for s, part in enumerate(parts, start=1):
            for k, (row_id, _) in enumerate(self._part_records(part)):
                winners[row_id] = (s << _SRC_BITS) | k
        return winners

    def _part_batches(self, parts: list[Path], winners: dict[str, int]) -> Iterator[pa.Table]:
        """Each part's rows that survive deduplication, as tables."""
        for s, part in enumerate(parts, start=1):
            with pq.ParquetFile(part) as pf:
                table = pf.read()
            ids = table.column("id").to_pylist()
            mask = [winners[i] == ((s << _SRC_BITS) | k) for k, i in enumerate(ids)]
            kept = table.filter(pa.array(mask, type=pa.bool_()))
            if kept.num_rows:
                yield kept

    def _merge(self, parts: list[Path], f: IO[Any]) -> None:
        winners = self._winners(parts)
        if self.fmt == "parquet":
            self._merge_parquet(parts, winners, f)
            return
        for k, (row_id, _, line) in enumerate(self._final_records()):
            if winners[row_id] == k:
                f.write(line)
        for table in self._part_batches(parts, winners):
            for row in table.to_pylist():
                if self.fmt == "jsonl":
                    f.write(json.dumps(_jsonable(row), ensure_ascii=False) + "\n")
                else:
                    f.write(_txt_line(row))

    def _merge_parquet(self, parts: list[Path], winners: dict[str, int], f: IO[Any]) -> None:
        schemas = [pq.read_schema(p) for p in parts]
        if self.path.is_file():
            schemas.insert(0, pq.read_schema(self.path))
        if self.passthrough_schema is not None:
            schemas.insert(0, output_schema(self.passthrough_schema, self.emit))
        schema = unify_schemas(schemas, metadata=self.metadata, emit=self.emit)
        pending: list[pa.Table] = []
        rows = 0
        with pq.ParquetWriter(f, schema) as writer:

            def emit(table: pa.Table) -> None:
                # Whole row groups of ROW_GROUP_ROWS go out; the remainder waits for more rows.
                nonlocal rows
                pending.append(conform_table(table, schema))
                rows += table.num_rows
                if rows >= ROW_GROUP_ROWS:
                    merged = pa.concat_tables(pending)
                    whole = rows - rows % ROW_GROUP_ROWS
                    writer.write_table(merged.slice(0, whole), row_group_size=ROW_GROUP_ROWS)
                    pending[:] = [merged.slice(whole)]
                    rows -= whole

            if self.path.is_file():
                start = 0
                for batch in pq.ParquetFile(self.path).iter_batches(batch_size=ROW_GROUP_ROWS):
                    ids = batch.column("id").to_pylist()
                    mask = [winners[i] == start + k for k, i in enumerate(ids)]
                    start += batch.num_rows
                    kept = pa.Table.from_batches([batch]).filter(pa.array(mask, type=pa.bool_()))
                    if kept.num_rows:
                        emit(kept)
            for table in self._part_batches(parts, winners):
                emit(table)
            if pending:
                writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
            elif not winners:
                writer.write_table(schema.empty_table())


class RowWriter(Protocol):
    """What ``oasr transcribe`` needs of an output: :class:`OutputWriter` and
    :class:`~oasr.io.subtitle_writer.SubtitleWriter` both are one."""

    metadata: dict[str, str]  # key-value metadata; a key set before close() is recorded

    def done_ids(self) -> set[str]: ...

    def previous_metadata(self) -> dict[str, str] | None: ...

    def write(self, row: OutputRow) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


def rows_to_table(rows: list[OutputRow], passthrough_schema: pa.Schema | None = None,
                  metadata: dict[str, str] | None = None,
                  emit: tuple[str, ...] | list[str] = ()) -> pa.Table:
    """Output rows as one Arrow table of the output schema: the fixed columns, those ``emit``
    adds, then the passthrough columns (typed by ``passthrough_schema`` where it names them,
    else inferred; a column of mixed Python types becomes JSON text)."""
    schema_fields = list(output_schema(None, emit))
    own = len(schema_fields)
    arrays = [pa.array([getattr(r, sf.name) for r in rows], type=sf.type) for sf in schema_fields]
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r.passthrough))
    for name in names:
        values = [r.passthrough.get(name) for r in rows]
        declared = (passthrough_schema.field(name).type
                    if passthrough_schema is not None and name in passthrough_schema.names
                    else None)
        try:
            arr = pa.array(values, type=declared)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # Mixed Python types in one JSONL column: keep them as JSON text.
            arr = pa.array([None if v is None else json.dumps(_jsonable(v)) for v in values],
                           type=pa.string())
        schema_fields.append(pa.field(name, arr.type))
        arrays.append(arr)
    schema = output_schema(pa.schema(schema_fields[own:]), emit)
    return pa.Table.from_arrays(arrays, schema=schema.with_metadata(metadata or {}))


def open_writer(
    path: str | Path,
    fmt: str = "parquet",
    metadata: dict[str, str] | None = None,
    retry_errors: bool = False,
    passthrough_schema: pa.Schema | None = None,
    cue_options: CueOptions | None = None,
    rows: int | None = None,
    emit: tuple[str, ...] | list[str] = (),
) -> RowWriter:
    """The writer of ``fmt`` at ``path`` (from :func:`resolve_output_path`): an
    :class:`OutputWriter` for parquet/jsonl/txt, a ``SubtitleWriter`` for srt/vtt (which uses
    ``cue_options`` and refuses ``rows`` > 1 into one file; the others ignore both). ``emit``:
    the columns to add (parquet, jsonl and json carry them; the text formats refuse them)."""
    if fmt in RECORDING_FORMATS:
        from oasr.io.subtitle_writer import SubtitleWriter

        return SubtitleWriter(path, fmt, metadata=metadata, retry_errors=retry_errors,
                              cue_options=cue_options, rows=rows, emit=emit)
    return OutputWriter(path, fmt, metadata=metadata, retry_errors=retry_errors,
                        passthrough_schema=passthrough_schema, emit=emit)
