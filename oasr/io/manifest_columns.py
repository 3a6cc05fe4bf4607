"""How a manifest's columns become :class:`ManifestRow` values: which column is the id, the
audio, the reference text, a segment's bounds and the passthrough columns (a
:class:`ColumnPlan` per schema), and how one record's values are checked and converted.

:mod:`oasr.io.manifest` reads the inputs (tables in record batches, JSONL lines, audio files)
and hands each record to :func:`build_row` with its plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from oasr.audio.errors import printable
from oasr.io.inputs import ManifestError
from oasr.io.schema import passthrough_name

ID_CANDIDATES = ("id", "utterance_id", "key", "audio_id")
AUDIO_CANDIDATES = ("audio", "audio_filepath", "path", "file", "audio_path")
TEXT_CANDIDATES = ("text", "transcript", "sentence", "reference")
_OPTIONAL = ("language", "task", "prompt")

_EMPTY_BYTES = "the audio is empty (0 bytes in the manifest)"


@dataclass
class ColumnMap:
    """Which manifest columns hold the id, the audio and the reference text (None = detect).

    ``emit``: the output columns the run adds (``--emit token_ids``); a manifest column of such
    a name passes through as ``input_<name>``, as one named like a fixed output column does."""

    id: str | None = None
    audio: str | None = None
    text: str | None = None
    emit: tuple[str, ...] = ()


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


@dataclass
class ColumnPlan:
    """Which column feeds which field, for one manifest schema."""

    id: str | None
    audio: str
    audio_kind: str  # "struct" | "binary" | "path" (JSONL: "json")
    text: str | None
    optional: dict[str, str]  # field name -> column
    segment: dict[str, str]  # "offset"/"duration" or "start"/"end" -> column
    passthrough: list[tuple[str, str]]  # (column, output name)


def pick_column(
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


def plan_columns(
    label: str, names: list[str], columns: ColumnMap, types: dict[str, pa.DataType] | None
) -> ColumnPlan:
    id_col = pick_column(label, names, columns.id, ID_CANDIDATES, "id", "--id-column")
    if id_col is not None and types is not None:
        _check_id_type(label, id_col, types[id_col])
    audio = pick_column(label, names, columns.audio, AUDIO_CANDIDATES, "audio", "--audio-column")
    if audio is None:
        raise ManifestError(
            f"{label}: no audio column (looked for {', '.join(AUDIO_CANDIDATES)}); available "
            f"columns: {', '.join(names) or '(none)'}; name it with --audio-column"
        )
    text = pick_column(label, names, columns.text, TEXT_CANDIDATES, "text", "--text-column")
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
        passthrough.append((audio, passthrough_name(audio, taken, columns.emit)))
        taken.add(passthrough[-1][1])
    for n in names:
        if n not in used:
            out = passthrough_name(n, taken, columns.emit)
            taken.add(out)
            passthrough.append((n, out))
    return ColumnPlan(id_col, audio, kind, text, optional, segment, passthrough)


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


def _audio_value(plan: ColumnPlan, value: Any, folder: Path
                 ) -> tuple[bytes | str | None, str | None]:
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


def _segment(plan: ColumnPlan, get: Any) -> tuple[float, float | None]:
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


def _passthrough_value(plan: ColumnPlan, column: str, value: Any) -> Any:
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


def build_row(
    plan: ColumnPlan,
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


def row_id_of(plan: ColumnPlan, value: Any, stem: str, index: int) -> tuple[str, str | None]:
    if plan.id is None:
        return f"{stem}-{index}", None
    if value is None:
        return f"{stem}-{index}", f"null id in column {plan.id!r}"
    return str(value), None


def path_id(plan: ColumnPlan, obj: dict[str, Any]) -> str | None:
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
