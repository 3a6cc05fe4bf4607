"""The Arrow schema of ``oasr transcribe`` output, and how passthrough columns join it.

Fixed columns come first, in a fixed order; then the columns a run adds on request
(``--emit``: :data:`EMITTED_FIELDS`, in that order); the manifest's other columns follow.
Passthrough types are only known per written part when the manifest is JSONL (inferred from
Python values), so parts may disagree: a column all-null in one part (``null`` type) and
``int64`` in the next, or ``int64`` here and ``string`` there. :func:`unify_schemas` settles
one type per column and :func:`conform_table` casts a part to it, so a merge never fails on a
passthrough type.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

__all__ = [
    "EMITTED_FIELDS",
    "OUTPUT_COLUMNS",
    "WORD_TYPE",
    "SEGMENT_TYPE",
    "output_schema",
    "fixed_schema",
    "output_columns",
    "passthrough_name",
    "unify_schemas",
    "conform_table",
]

WORD_TYPE = pa.struct(
    [
        ("word", pa.string()),
        ("start", pa.float64()),
        ("end", pa.float64()),
        ("confidence", pa.float64()),
    ]
)
SEGMENT_TYPE = pa.struct([("start", pa.float64()), ("end", pa.float64()), ("text", pa.string())])

_FIXED_FIELDS: tuple[pa.Field, ...] = (
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string()),
    pa.field("words", pa.list_(WORD_TYPE)),
    pa.field("segments", pa.list_(SEGMENT_TYPE)),
    pa.field("confidence", pa.float64()),
    pa.field("duration", pa.float64()),
    pa.field("language", pa.string()),
    pa.field("language_probability", pa.float64()),
    pa.field("finish_reason", pa.string()),
    pa.field("error", pa.string()),
    pa.field("coverage", pa.float64()),
)

OUTPUT_COLUMNS: tuple[str, ...] = tuple(f.name for f in _FIXED_FIELDS)

# The columns a run writes only when asked (``oasr transcribe --emit NAME``; the run option
# ``emit``, oasr.transcribe.options.EMITTABLE), after the fixed columns, in this order. Absent
# otherwise: an output without ``--emit`` is what it was before these existed.
# ``token_ids``: the decoded token ids (null on error rows, [] on rows without speech).
EMITTED_FIELDS: dict[str, pa.Field] = {
    "token_ids": pa.field("token_ids", pa.list_(pa.int32())),
}


def _emitted(emit: tuple[str, ...] | list[str]) -> list[pa.Field]:
    unknown = [e for e in emit if e not in EMITTED_FIELDS]
    if unknown:
        raise ValueError(f"emit {', '.join(unknown)}: not an output column; choose from "
                         f"{', '.join(EMITTED_FIELDS)}")
    return [f for name, f in EMITTED_FIELDS.items() if name in emit]


def output_columns(emit: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The output's own column names: the fixed ones, then those ``emit`` adds."""
    return OUTPUT_COLUMNS + tuple(f.name for f in _emitted(emit))


def fixed_schema(emit: tuple[str, ...] | list[str] = ()) -> pa.Schema:
    """The output columns every row has (those ``emit`` adds included), without passthrough."""
    return pa.schema(list(_FIXED_FIELDS) + _emitted(emit))


def output_schema(passthrough: pa.Schema | None,
                  emit: tuple[str, ...] | list[str] = ()) -> pa.Schema:
    """Fixed output columns, the columns ``emit`` adds, then ``passthrough``'s fields.

    A passthrough field named like one of the output's own columns is refused: the manifest
    reader renames such columns (see :func:`passthrough_name`) before they reach here.
    """
    fields = list(_FIXED_FIELDS) + _emitted(emit)
    own = {f.name for f in fields}
    if passthrough is not None:
        for f in passthrough:
            if f.name in own:
                raise ValueError(
                    f"passthrough column {f.name!r} collides with the output column of that "
                    f"name; rename it with passthrough_name()"
                )
            fields.append(f)
    return pa.schema(fields)


def passthrough_name(name: str, taken: set[str] | frozenset[str] = frozenset(),
                     emit: tuple[str, ...] | list[str] = ()) -> str:
    """The output name of a manifest column: ``input_<name>`` where ``name`` is an output column
    (re-transcribing a previous output keeps its old ``words`` as ``input_words``). A column
    named like one ``emit`` adds is renamed only when the run adds it (``token_ids`` passes
    through as it is without ``--emit token_ids``)."""
    own = output_columns(emit)
    out = name
    while out in own or out in taken:
        out = f"input_{out}"
    return out


def _unify_pair(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    if a == b:
        return a
    try:
        s = pa.unify_schemas(
            [pa.schema([("c", a)]), pa.schema([("c", b)])], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return s.field("c").type


def unify_schemas(schemas: list[pa.Schema], metadata: dict[str, str] | None = None,
                  emit: tuple[str, ...] | list[str] = ()) -> pa.Schema:
    """One schema covering every column of ``schemas``: the fixed output columns, those
    ``emit`` adds, then the others in first-seen order.

    Types promote permissively (null -> anything, int32 -> int64, int -> double); a column whose
    types cannot be promoted becomes ``string`` (values JSON-encoded by :func:`conform_table`).
    The output's own columns (fixed and emitted) always keep their declared types; an emitted
    column a schema lacks (a part written before it was asked for) is null there.
    """
    own = list(_FIXED_FIELDS) + _emitted(emit)
    fixed = {f.name: f for f in own}
    types: dict[str, pa.DataType] = {}
    for schema in schemas:
        for f in schema:
            if f.name in fixed:
                continue
            if f.name not in types:
                types[f.name] = f.type
                continue
            merged = _unify_pair(types[f.name], f.type)
            types[f.name] = pa.string() if merged is None else merged
    fields = own + [pa.field(n, t) for n, t in types.items()]
    return pa.schema(fields, metadata=metadata)


def _json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: missing ones null, each cast to its type
    (a lossless cast, else JSON text where the target is ``string``)."""
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                if not pa.types.is_string(f.type):
                    raise
                col = pa.array([_json_text(v) for v in col.to_pylist()], type=pa.string())
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)
