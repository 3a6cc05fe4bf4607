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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.audio.errors import printable
from oasr.io.inputs import AUDIO_EXTENSIONS, InputFile, ManifestError, expand_inputs
from oasr.io.os_reason import reason
from oasr.io.schema import OUTPUT_COLUMNS, passthrough_name, unify_schemas

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

ID_CANDIDATES = ("id", "utterance_id", "key", "audio_id")
AUDIO_CANDIDATES = ("audio", "audio_filepath", "path", "file", "audio_path")
TEXT_CANDIDATES = ("text", "transcript", "sentence", "reference")
_OPTIONAL = ("language", "task", "prompt")

_EMPTY_BYTES = "the audio is empty (0 bytes in the manifest)"
# Bit position packing (input index, row) into one int for the duplicate-id table: ids of a
# multi-million-row run stay cheap to remember.
_ROW_BITS = 40


@dataclass
class ColumnMap:
    """Which manifest columns hold the id, the audio and the reference text (None = detect)."""

    id: str | None = None
    audio: str | None = None
    text: str | None = None


@dataclass
class ManifestRow:
    """One recording (or one segment of one) to transcribe.

    ``audio`` is the encoded file's bytes or an absolute path; None only when ``error`` is set.
    ``offset``/``duration`` are seconds into the recording (duration None = to the end).
    ``passthrough`` holds every other manifest column under its output name.
    """

    id: str
    audio: bytes | str | None
    offset: float = 0.0
    duration: float | None = None
    text: str | None = None
    language: str | None = None
    task: str | None = None
    prompt: str | None = None
    passthrough: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    error: str | None = None

    def located(self, message: str) -> str:
        """``message`` naming this row: prefixed with its source (the manifest line, or the
        audio file) unless it begins with it already, as a decode error of a file does."""
        return message if message.startswith(self.source) else f"{self.source}: {message}"


def shard_keeps(row_id: str, shard: tuple[int, int] | None) -> bool:
    """True when ``row_id`` belongs to shard ``(i, n)``: a hash of the id, not of row order."""
    if shard is None:
        return True
    i, n = shard
    return zlib.crc32(row_id.encode("utf-8")) % n == i


def _check_shard(shard: tuple[int, int] | None) -> None:
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ManifestError(f"shard {shard[0]}/{shard[1]}: need 0 <= i < n")


# ----------------------------------------------------------------------------- columns


@dataclass
class _Plan:
    """Which column feeds which field, for one manifest schema."""

    id: str | None
    audio: str
    audio_kind: str  # "struct" | "binary" | "path" (JSONL: "json")
    text: str | None
    optional: dict[str, str]  # field name -> column
    segment: dict[str, str]  # "offset"/"duration" or "start"/"end" -> column
    passthrough: list[tuple[str, str]]  # (column, output name)


def _pick(
    label: str,
    names: list[str],
    explicit: str | None,
    candidates: tuple[str, ...],
    what: str,
    option: str,
) -> str | None:
    if explicit is not None:
        if explicit not in names:
            raise ManifestError(
                f"{label}: no {what} column {explicit!r} ({option}); available columns: "
                f"{', '.join(names) or '(none)'}"
            )
        return explicit
    return next((c for c in candidates if c in names), None)


def _audio_kind(label: str, column: str, dtype: pa.DataType) -> str:
    if pa.types.is_struct(dtype):
        fields = {dtype.field(i).name for i in range(dtype.num_fields)}
        if fields & {"bytes", "path"}:
            return "struct"
    elif (
        pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
        or pa.types.is_binary_view(dtype)
    ):
        return "binary"
    elif (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_string_view(dtype)
    ):
        return "path"
    raise ManifestError(
        f"{label}: audio column {column!r} has type {dtype}; expected struct{{bytes, path}} "
        f"(the Hugging Face datasets layout), binary, or a path string"
    )


def _check_id_type(label: str, column: str, dtype: pa.DataType) -> None:
    """Ids are text or integers: a float id prints differently than it was written, and a
    binary or nested one is not an id at all."""
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    if (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_string_view(dtype) or pa.types.is_integer(dtype)
            or pa.types.is_null(dtype)):
        return
    raise ManifestError(
        f"{label}: id column {column!r} holds {dtype}; ids must be strings or integers: cast "
        f"it, or name another column with --id-column")


def _plan(
    label: str, names: list[str], columns: ColumnMap, types: dict[str, pa.DataType] | None
) -> _Plan:
    id_col = _pick(label, names, columns.id, ID_CANDIDATES, "id", "--id-column")
    if id_col is not None and types is not None:
        _check_id_type(label, id_col, types[id_col])
    audio = _pick(label, names, columns.audio, AUDIO_CANDIDATES, "audio", "--audio-column")
    if audio is None:
        raise ManifestError(
            f"{label}: no audio column (looked for {', '.join(AUDIO_CANDIDATES)}); available "
            f"columns: {', '.join(names) or '(none)'}; name it with --audio-column"
        )
    text = _pick(label, names, columns.text, TEXT_CANDIDATES, "text", "--text-column")
    kind = _audio_kind(label, audio, types[audio]) if types is not None else "json"
    optional = {n: n for n in _OPTIONAL if n in names and n not in (id_col, audio, text)}
    if "offset" in names or "duration" in names:
        segment = {k: k for k in ("offset", "duration") if k in names}
    else:
        segment = {k: k for k in ("start", "end") if k in names}
    used = {id_col, audio, text, *optional.values(), *segment.values()}
    passthrough: list[tuple[str, str]] = []
    taken: set[str] = set()
    if kind in ("path", "json"):  # a path as written comes back out (bytes do not)
        passthrough.append((audio, passthrough_name(audio, taken)))
        taken.add(passthrough[-1][1])
    for n in names:
        if n not in used:
            out = passthrough_name(n, taken)
            taken.add(out)
            passthrough.append((n, out))
    return _Plan(id_col, audio, kind, text, optional, segment, passthrough)


# ----------------------------------------------------------------------------- values


def _resolve_path(raw: str, folder: Path) -> tuple[str | None, str | None]:
    if "://" in raw:
        return None, f"audio URLs are not supported, only local paths: {raw}"
    full = os.path.abspath(raw if os.path.isabs(raw) else folder / raw)
    if not os.path.isfile(full):
        return None, (
            f"audio path does not exist: {printable(full)} (paths resolve against the "
            "manifest's folder)"
        )
    return full, None


def _audio_value(plan: _Plan, value: Any, folder: Path) -> tuple[bytes | str | None, str | None]:
    if value is None:
        return None, f"no audio (null in column {plan.audio!r})"
    kind = plan.audio_kind
    if kind == "json":
        kind = "struct" if isinstance(value, dict) else "path" if isinstance(value, str) else ""
    if kind == "struct":
        data, path = value.get("bytes"), value.get("path")
        if data:
            return bytes(data), None
        if data is not None and not path:
            return None, _EMPTY_BYTES
        if path:
            resolved, error = _resolve_path(str(path), folder)
            if data is not None and error is not None:  # empty bytes, and no file to fall back on
                return None, f"{_EMPTY_BYTES} (and {error})"
            return resolved, error
        return None, f"no audio: column {plan.audio!r} has neither bytes nor a path"
    if kind == "binary":
        return (bytes(value), None) if len(value) else (None, _EMPTY_BYTES)
    if kind == "path":
        return _resolve_path(str(value), folder)
    return None, f"audio column {plan.audio!r} holds {type(value).__name__}, not a path"


def _seconds(value: Any, name: str) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} is not a number: {value!r}") from None
    if not out >= 0.0:  # also refuses NaN
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return out


def _segment(plan: _Plan, get: Any) -> tuple[float, float | None]:
    """(offset, duration) from offset/duration or start/end columns; ValueError when bad."""
    if "start" in plan.segment or "end" in plan.segment:
        start = _seconds(get(plan.segment.get("start")), "start") or 0.0
        end = _seconds(get(plan.segment.get("end")), "end")
        if end is not None and end <= start:
            raise ValueError(f"end ({end}) must be after start ({start})")
        return start, None if end is None else end - start
    offset = _seconds(get(plan.segment.get("offset")), "offset") or 0.0
    duration = _seconds(get(plan.segment.get("duration")), "duration")
    if duration is not None and duration <= 0.0:
        raise ValueError(f"duration must be > 0 seconds, got {duration}")
    return offset, duration


def _passthrough_value(plan: _Plan, column: str, value: Any) -> Any:
    # The audio column passes through only as the path it was written as.
    if column == plan.audio and not isinstance(value, str):
        return None
    return _writable(value)


def _writable(value: Any) -> Any:
    """``value`` with every string :func:`printable` (JSONL values may hold surrogates)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_writable(v) for v in value]
    if isinstance(value, dict):
        return {printable(str(k)): _writable(v) for k, v in value.items()}
    return value


def _str(value: Any) -> str | None:
    return None if value is None else printable(str(value))


def id_problem(value: Any) -> str | None:
    """Why ``value`` (an id column's value, not null) cannot be a row id, or None: ids are
    written to every output and compared on resume, so they are text or integers, and valid
    Unicode."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return f"is a {type(value).__name__} ({value!r:.40}), not a string or an integer"
    text = str(value)
    if printable(text) != text:
        return (f"'{printable(text)}' is not valid Unicode text (bytes that are not UTF-8, or "
                "a lone surrogate escape)")
    return None


def _build_row(
    plan: _Plan,
    values: dict[str, Any],
    row_id: str,
    id_error: str | None,
    folder: Path,
    source: str,
) -> ManifestRow:
    get = values.get
    audio, error = _audio_value(plan, get(plan.audio), folder)
    offset, duration = 0.0, None
    try:
        offset, duration = _segment(plan, lambda c: None if c is None else get(c))
    except ValueError as exc:
        error = error or str(exc)
    return ManifestRow(
        id=row_id,
        audio=audio,
        offset=offset,
        duration=duration,
        text=_str(get(plan.text)) if plan.text else None,
        language=_str(get(plan.optional["language"])) if "language" in plan.optional else None,
        task=_str(get(plan.optional["task"])) if "task" in plan.optional else None,
        prompt=_str(get(plan.optional["prompt"])) if "prompt" in plan.optional else None,
        passthrough={out: _passthrough_value(plan, col, get(col))
                     for col, out in plan.passthrough},
        source=source,
        error=id_error or error,
    )


def _row_id(plan: _Plan, value: Any, stem: str, index: int) -> tuple[str, str | None]:
    if plan.id is None:
        return f"{stem}-{index}", None
    if value is None:
        return f"{stem}-{index}", f"null id in column {plan.id!r}"
    return str(value), None


def _path_id(plan: _Plan, obj: dict[str, Any]) -> str | None:
    """A JSONL row's id when the manifest has no id column (NeMo's layout): its audio path as
    written, ``@<offset>`` added for a segment that does not start at 0 (several segments of
    one recording). None when the audio is not a path string."""
    path = obj.get(plan.audio)
    if not isinstance(path, str) or not path:
        return None
    path = printable(path)
    key = "start" if "start" in plan.segment else "offset"
    offset = obj.get(plan.segment[key]) if key in plan.segment else None
    if isinstance(offset, (int, float)) and offset:
        return f"{path}@{offset:g}"
    return path


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
    unit: InputFile, plan: _Plan, shard: tuple[int, int] | None, batch_rows: int
) -> Iterator[tuple[ManifestRow, int]]:
    folder = unit.path.resolve().parent
    stem = printable(unit.path.stem)
    start = 0
    for batch in _table_batches(unit, batch_rows):
        n = batch.num_rows
        raw_ids = batch.column(plan.id).to_pylist() if plan.id else [None] * n
        ids = [_row_id(plan, v, stem, start + k) for k, v in enumerate(raw_ids)]
        keep = [k for k in range(n) if shard_keeps(ids[k][0], shard)]
        if keep:
            sub = batch if len(keep) == n else batch.take(pa.array(keep, type=pa.int64()))
            cols = {name: sub.column(name).to_pylist() for name in sub.schema.names}
            for j, k in enumerate(keep):
                values = {name: col[j] for name, col in cols.items()}
                row_id, id_error = ids[k]
                source = unit.source(start + k)
                row = _build_row(plan, values, row_id, id_error, folder, source)
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
        self.cache: dict[tuple[str, ...], _Plan | str] = {}
        self.checked = False

    def plan(self, obj: dict[str, Any], number: int) -> _Plan | str:
        """The plan for this object, or a row error when this line lacks a column."""
        keys = tuple(obj)
        if keys not in self.cache:
            label = f"{self.unit.path} line {number}"
            try:
                self.cache[keys] = _plan(label, list(keys), self.columns, None)
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
    plan: _Plan | None
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
        row_id, id_error = _row_id(plan, value, stem, index)
        if plan.id is None:
            row_id = _path_id(plan, obj) or row_id
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
            yield _build_row(e.plan, e.obj, e.row_id, e.error, folder, source), e.number


def _check_jsonl_columns(unit: InputFile, columns: ColumnMap) -> None:
    """Fail fast on an explicit column the first object lacks."""
    for number, _, obj, _ in _jsonl_lines(unit):
        if obj is not None:
            _JsonlPlanner(unit, columns).plan(obj, number)
            return


# ----------------------------------------------------------------------------- public


def _prepare(inputs: list[str], columns: ColumnMap) -> list[tuple[InputFile, _Plan | None]]:
    prepared: list[tuple[InputFile, _Plan | None]] = []
    for unit in expand_inputs(list(inputs)):
        plan = None
        if unit.kind in ("parquet", "arrow"):
            schema = _table_schema(unit)
            types = {f.name: f.type for f in schema}
            plan = _plan(str(unit.path), schema.names, columns, types)
        elif unit.kind == "jsonl":
            _check_jsonl_columns(unit, columns)
        prepared.append((unit, plan))
    return prepared


def _unit_rows(
    unit: InputFile,
    plan: _Plan | None,
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


def source_of(prepared: list[tuple[InputFile, _Plan | None]], key: int) -> str:
    """The row a packed ``(input index << _ROW_BITS) | position`` key names."""
    return prepared[key >> _ROW_BITS][0].source(key & ((1 << _ROW_BITS) - 1))


def duplicate_id(row_id: str, first: str, second: str) -> ManifestError:
    return ManifestError(
        f"duplicate id '{row_id}': {first} and {second} (ids are the resume key; make them "
        "unique in the manifest, or name a unique column with --id-column)")


def _iterate(
    prepared: list[tuple[InputFile, _Plan | None]],
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
    plan = _plan(label, schema.names, columns, {f.name: f.type for f in schema})
    if not plan.passthrough:
        return None
    return pa.schema([pa.field(out, schema.field(col).type) for col, out in plan.passthrough])


def id_column(schema: pa.Schema, columns: ColumnMap = ColumnMap(),
              label: str = "table") -> str | None:
    """The column a manifest of ``schema`` takes its row ids from (None: it has none)."""
    return _pick(label, schema.names, columns.id, ID_CANDIDATES, "id", "--id-column")


def rows_from_table(table: pa.Table | pa.RecordBatch, columns: ColumnMap = ColumnMap(),
                    folder: str | Path = ".", label: str = "table") -> Iterator[ManifestRow]:
    """The rows of an in-memory manifest table (a Ray Data batch, say), read as a Parquet
    manifest's rows are: the same columns picked, relative paths resolved against ``folder``.

    A table has no position in a file, so it needs an id column, and each row's ``source``
    (what its error names) is ``<label> id <id>``."""
    plan = _plan(label, table.schema.names, columns,
                 {f.name: f.type for f in table.schema})
    if plan.id is None:
        raise ManifestError(f"{label}: no id column (looked for {', '.join(ID_CANDIDATES)}); "
                            f"available columns: {', '.join(table.schema.names)}; name it with "
                            "--id-column")
    base = Path(folder).resolve()
    cols = {name: table.column(name).to_pylist() for name in table.schema.names}
    for k in range(table.num_rows):
        values = {name: col[k] for name, col in cols.items()}
        row_id, id_error = _row_id(plan, values[plan.id], label, k)
        yield _build_row(plan, values, row_id, id_error, base, f"{label} id {row_id}")

