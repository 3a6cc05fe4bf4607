"""Input manifests of ``oasr transcribe``: Parquet / Arrow IPC / JSONL manifests, audio files,
folders and globs, read as a stream of :class:`ManifestRow`.

Tables are read in record batches so a manifest of millions of rows (or of embedded audio bytes)
never sits in memory whole. A problem with one row (a missing file, a bad JSON line, a negative
offset) does not stop the run: the row carries ``error`` and flows on so the output records it.
A problem with the run as a whole (an input that does not exist, a named column that is not
there, two rows with one id) raises :class:`ManifestError` before or when it is met.

Ids are the resume key, so they must be stable and unique: an id column when there is one,
otherwise (JSONL with an audio path, NeMo's layout) the path as written, ``@<offset>`` added
for a segment not starting at 0, otherwise ``<manifest stem>-<row index>``; for audio files the
file stem (or, where stems collide, the path relative to the files' common folder without
extension). :mod:`oasr.io.manifest_ids` checks them all in a first pass (``count_rows``).

Bytes that are not UTF-8 in a JSONL manifest are kept as what they are: an audio path holding
them opens the file of that name; in every value that reaches the output (ids from paths, text,
passthrough columns, messages) they read ``\\xNN`` (:func:`oasr.audio.printable`). An id given
in an id column must be valid text: :func:`id_problem` says why one is not.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.audio.errors import printable
from oasr.io.inputs import AUDIO_EXTENSIONS, InputFile, ManifestError, expand_inputs
from oasr.io.manifest_columns import (
    ID_CANDIDATES,
    ColumnMap,
    ColumnPlan,
    ManifestRow,
    build_row,
    id_problem,
    path_id,
    pick_column,
    plan_columns,
    row_id_of,
)
from oasr.io.os_reason import reason
from oasr.io.schema import OUTPUT_COLUMNS, unify_schemas

__all__ = [
    "AUDIO_EXTENSIONS",
    "ColumnMap",
    "ManifestError",
    "ManifestRow",
    "id_problem",
    "iter_manifest",
    "passthrough_schema",
    "shard_keeps",
]

# Bit position packing (input index, row) into one int for the duplicate-id table: ids of a
# multi-million-row run stay cheap to remember.
_ROW_BITS = 40


def shard_keeps(row_id: str, shard: tuple[int, int] | None) -> bool:
    """True when ``row_id`` belongs to shard ``(i, n)``: a hash of the id, not of row order."""
    if shard is None:
        return True
    i, n = shard
    return zlib.crc32(row_id.encode("utf-8")) % n == i


def _check_shard(shard: tuple[int, int] | None) -> None:
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ManifestError(f"shard {shard[0]}/{shard[1]}: need 0 <= i < n")


# ----------------------------------------------------------------------------- tables


def _table_schema(unit: InputFile) -> pa.Schema:
    try:
        if unit.kind == "parquet":
            return pq.read_schema(unit.path)
        with pa.memory_map(str(unit.path), "r") as src:
            return _open_ipc(src).schema
    except (pa.ArrowException, OSError) as exc:
        raise ManifestError(f"cannot read {unit.kind} manifest {printable(str(unit.path))}: "
                            f"{reason(exc, unit.path)}") from exc


def _open_ipc(src: Any) -> Any:
    """An IPC file reader, else (the stream format has no footer) a stream reader."""
    try:
        return pa.ipc.open_file(src)
    except pa.ArrowInvalid:
        src.seek(0)
        return pa.ipc.open_stream(src)


def _table_batches(
    unit: InputFile, batch_rows: int, columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    if unit.kind == "parquet":
        yield from pq.ParquetFile(unit.path).iter_batches(batch_size=batch_rows, columns=columns)
        return
    with pa.memory_map(str(unit.path), "r") as src:
        reader = _open_ipc(src)
        if isinstance(reader, pa.ipc.RecordBatchFileReader):
            batches: Any = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            batches = reader
        for batch in batches:
            if columns is not None:
                batch = batch.select(columns)
            for off in range(0, batch.num_rows, batch_rows):
                yield batch.slice(off, batch_rows)


def _table_rows(
    unit: InputFile, plan: ColumnPlan, shard: tuple[int, int] | None, batch_rows: int
) -> Iterator[tuple[ManifestRow, int]]:
    folder = unit.path.resolve().parent
    stem = printable(unit.path.stem)
    start = 0
    for batch in _table_batches(unit, batch_rows):
        n = batch.num_rows
        raw_ids = batch.column(plan.id).to_pylist() if plan.id else [None] * n
        ids = [row_id_of(plan, v, stem, start + k) for k, v in enumerate(raw_ids)]
        keep = [k for k in range(n) if shard_keeps(ids[k][0], shard)]
        if keep:
            sub = batch if len(keep) == n else batch.take(pa.array(keep, type=pa.int64()))
            cols = {name: sub.column(name).to_pylist() for name in sub.schema.names}
            for j, k in enumerate(keep):
                values = {name: col[j] for name, col in cols.items()}
                row_id, id_error = ids[k]
                source = unit.source(start + k)
                row = build_row(plan, values, row_id, id_error, folder, source)
                yield row, start + k
        start += n


# ----------------------------------------------------------------------------- JSONL


def _jsonl_lines(unit: InputFile) -> Iterator[tuple[int, int, dict[str, Any] | None, str | None]]:
    """(line number, row index, object or None, parse error) for each non-blank line; bytes
    that are not UTF-8 kept as surrogate escapes (see the module docstring)."""
    index = 0
    with open(unit.path, encoding="utf-8", errors="surrogateescape") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                error = None if isinstance(obj, dict) else "not a JSON object"
            except json.JSONDecodeError as exc:
                obj, error = None, f"invalid JSON ({exc.msg} at column {exc.colno})"
            if error is not None:
                obj, error = None, f"{unit.source(number)}: {error}"
            yield number, index, obj, error
            index += 1


class _JsonlPlanner:
    """Plans per distinct key set; explicit columns checked against the first object."""

    def __init__(self, unit: InputFile, columns: ColumnMap) -> None:
        self.unit, self.columns = unit, columns
        self.cache: dict[tuple[str, ...], ColumnPlan | str] = {}
        self.checked = False

    def plan(self, obj: dict[str, Any], number: int) -> ColumnPlan | str:
        """The plan for this object, or a row error when this line lacks a column."""
        keys = tuple(obj)
        if keys not in self.cache:
            label = f"{self.unit.path} line {number}"
            try:
                self.cache[keys] = plan_columns(label, list(keys), self.columns, None)
            except ManifestError as exc:
                if not self.checked:
                    raise
                self.cache[keys] = str(exc)
            self.checked = True
        return self.cache[keys]


@dataclass
class _JsonlEntry:
    """One JSONL line read as far as its id: ``plan`` None (and ``error`` set) for a line
    that is not a usable object."""

    number: int
    row_id: str
    obj: dict[str, Any] | None
    plan: ColumnPlan | None
    error: str | None


def _jsonl_entries(unit: InputFile, columns: ColumnMap) -> Iterator[_JsonlEntry]:
    """Each line's id, as :func:`_jsonl_rows` gives it, without resolving its audio; an id
    that cannot be one (:func:`id_problem`) raises ManifestError naming the line."""
    stem = printable(unit.path.stem)
    planner = _JsonlPlanner(unit, columns)
    for number, index, obj, error in _jsonl_lines(unit):
        plan = planner.plan(obj, number) if obj is not None else None
        if obj is None or isinstance(plan, str):
            yield _JsonlEntry(number, f"{stem}-{index}", None, None, error or str(plan))
            continue
        assert plan is not None
        value = obj.get(plan.id) if plan.id else None
        if value is not None and (problem := id_problem(value)) is not None:
            raise ManifestError(
                f"{unit.source(number)}: the id {problem}; fix it in the manifest (ids are "
                f"the resume key, written to every output) or name another column with "
                "--id-column")
        row_id, id_error = row_id_of(plan, value, stem, index)
        if plan.id is None:
            row_id = path_id(plan, obj) or row_id
        yield _JsonlEntry(number, row_id, obj, plan, id_error)


def _jsonl_rows(
    unit: InputFile, columns: ColumnMap, shard: tuple[int, int] | None
) -> Iterator[tuple[ManifestRow, int]]:
    folder = unit.path.resolve().parent
    for e in _jsonl_entries(unit, columns):
        if not shard_keeps(e.row_id, shard):
            continue
        source = unit.source(e.number)
        if e.plan is None:
            yield ManifestRow(e.row_id, None, source=source, error=e.error), e.number
        else:
            assert e.obj is not None
            yield build_row(e.plan, e.obj, e.row_id, e.error, folder, source), e.number


def _check_jsonl_columns(unit: InputFile, columns: ColumnMap) -> None:
    """Fail fast on an explicit column the first object lacks."""
    for number, _, obj, _ in _jsonl_lines(unit):
        if obj is not None:
            _JsonlPlanner(unit, columns).plan(obj, number)
            return


# ----------------------------------------------------------------------------- public


def _prepare(inputs: list[str], columns: ColumnMap) -> list[tuple[InputFile, ColumnPlan | None]]:
    prepared: list[tuple[InputFile, ColumnPlan | None]] = []
    for unit in expand_inputs(list(inputs)):
        plan = None
        if unit.kind in ("parquet", "arrow"):
            schema = _table_schema(unit)
            types = {f.name: f.type for f in schema}
            plan = plan_columns(str(unit.path), schema.names, columns, types)
        elif unit.kind == "jsonl":
            _check_jsonl_columns(unit, columns)
        prepared.append((unit, plan))
    return prepared


def _unit_rows(
    unit: InputFile,
    plan: ColumnPlan | None,
    columns: ColumnMap,
    shard: tuple[int, int] | None,
    batch_rows: int,
) -> Iterator[tuple[ManifestRow, int]]:
    if unit.kind == "audio":
        assert unit.audio_id is not None
        if shard_keeps(unit.audio_id, shard):
            full = os.path.abspath(unit.path)
            ok = os.path.isfile(full)
            yield (
                ManifestRow(
                    unit.audio_id,
                    full if ok else None,
                    source=str(unit.path),
                    error=None if ok else f"audio path does not exist: {full}",
                ),
                0,
            )
    elif unit.kind == "jsonl":
        yield from _jsonl_rows(unit, columns, shard)
    else:
        assert plan is not None
        yield from _table_rows(unit, plan, shard, batch_rows)


def iter_manifest(
    inputs: list[str],
    columns: ColumnMap = ColumnMap(),
    shard: tuple[int, int] | None = None,
    limit: int | None = None,
    batch_rows: int = 256,
) -> Iterator[ManifestRow]:
    """Rows of every input in order, streamed.

    Inputs are expanded and every manifest's columns checked now (a ManifestError here costs
    nothing); rows are read lazily. ``shard=(i, n)`` keeps rows whose id hashes to ``i``;
    ``limit`` counts rows after sharding. Two rows with one id raise ManifestError when met.
    """
    _check_shard(shard)
    if batch_rows < 1:
        raise ManifestError(f"batch_rows must be >= 1, got {batch_rows}")
    prepared = _prepare(inputs, columns)
    return _iterate(prepared, columns, shard, limit, batch_rows)


def source_of(prepared: list[tuple[InputFile, ColumnPlan | None]], key: int) -> str:
    """The row a packed ``(input index << _ROW_BITS) | position`` key names."""
    return prepared[key >> _ROW_BITS][0].source(key & ((1 << _ROW_BITS) - 1))


def duplicate_id(row_id: str, first: str, second: str) -> ManifestError:
    return ManifestError(
        f"duplicate id '{row_id}': {first} and {second} (ids are the resume key; make them "
        "unique in the manifest, or name a unique column with --id-column)")


def _iterate(
    prepared: list[tuple[InputFile, ColumnPlan | None]],
    columns: ColumnMap,
    shard: tuple[int, int] | None,
    limit: int | None,
    batch_rows: int,
) -> Iterator[ManifestRow]:
    if limit is not None and limit <= 0:
        return
    seen: dict[str, int] = {}
    emitted = 0
    for u, (unit, plan) in enumerate(prepared):
        for row, pos in _unit_rows(unit, plan, columns, shard, batch_rows):
            key = (u << _ROW_BITS) | pos
            first = seen.setdefault(row.id, key)
            if first != key:
                raise duplicate_id(row.id, source_of(prepared, first), row.source)
            yield row
            emitted += 1
            if limit is not None and emitted >= limit:
                return


def passthrough_schema(inputs: list[str], columns: ColumnMap = ColumnMap()) -> pa.Schema | None:
    """The Arrow types of the passthrough columns of the Parquet/Arrow manifests among
    ``inputs`` (under their output names), for :class:`~oasr.io.writer.OutputWriter` to keep
    exact types; None when no manifest declares any (JSONL types are inferred at write time)."""
    schemas = []
    for unit, plan in _prepare(inputs, columns):
        if plan is None or not plan.passthrough:
            continue
        schema = _table_schema(unit)
        schemas.append(
            pa.schema([pa.field(out, schema.field(col).type) for col, out in plan.passthrough])
        )
    if not schemas:
        return None
    return pa.schema(list(unify_schemas(schemas))[len(OUTPUT_COLUMNS) :])


def table_plan_schema(schema: pa.Schema, columns: ColumnMap = ColumnMap(),
                      label: str = "table") -> pa.Schema | None:
    """The passthrough columns' Arrow types (under their output names) of one manifest
    ``schema``, as :func:`passthrough_schema` gives for a file; None when there are none."""
    plan = plan_columns(label, schema.names, columns, {f.name: f.type for f in schema})
    if not plan.passthrough:
        return None
    return pa.schema([pa.field(out, schema.field(col).type) for col, out in plan.passthrough])


def id_column(schema: pa.Schema, columns: ColumnMap = ColumnMap(),
              label: str = "table") -> str | None:
    """The column a manifest of ``schema`` takes its row ids from (None: it has none)."""
    return pick_column(label, schema.names, columns.id, ID_CANDIDATES, "id", "--id-column")


def rows_from_table(table: pa.Table | pa.RecordBatch, columns: ColumnMap = ColumnMap(),
                    folder: str | Path = ".", label: str = "table") -> Iterator[ManifestRow]:
    """The rows of an in-memory manifest table (a Ray Data batch, say), read as a Parquet
    manifest's rows are: the same columns picked, relative paths resolved against ``folder``.

    A table has no position in a file, so it needs an id column, and each row's ``source``
    (what its error names) is ``<label> id <id>``."""
    plan = plan_columns(label, table.schema.names, columns,
                 {f.name: f.type for f in table.schema})
    if plan.id is None:
        raise ManifestError(f"{label}: no id column (looked for {', '.join(ID_CANDIDATES)}); "
                            f"available columns: {', '.join(table.schema.names)}; name it with "
                            "--id-column")
    base = Path(folder).resolve()
    cols = {name: table.column(name).to_pylist() for name in table.schema.names}
    for k in range(table.num_rows):
        values = {name: col[k] for name, col in cols.items()}
        row_id, id_error = row_id_of(plan, values[plan.id], label, k)
        yield build_row(plan, values, row_id, id_error, base, f"{label} id {row_id}")

