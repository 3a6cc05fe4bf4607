"""The columns ``--emit`` adds (``token_ids``): where they sit in the schema, how each format
carries them, what a manifest column of that name becomes, and resuming an output with them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oasr.io.output_format import EMIT_FORMATS, check_emit
from oasr.io.schema import (
    EMITTED_FIELDS,
    OUTPUT_COLUMNS,
    conform_table,
    output_columns,
    output_schema,
    passthrough_name,
    unify_schemas,
)
from oasr.io.stdout_writer import StdoutWriter
from oasr.io.subtitle_writer import SubtitleWriter
from oasr.io.writer import OutputError, OutputRow, OutputWriter, rows_to_table
from oasr.transcribe.options import EMITTABLE

TOKENS = ("token_ids",)
IDS = pa.list_(pa.int32())


def _rows() -> list[OutputRow]:
    return [
        OutputRow(id="a", text="hello", finish_reason="stop", token_ids=[5, 7, 9],
                  passthrough={"speaker": "x"}),
        OutputRow(id="b", error="unreadable", passthrough={"speaker": "y"}),
        OutputRow(id="c", text="", finish_reason="no_speech", token_ids=[],
                  passthrough={"speaker": "z"}),
    ]


def test_the_emittable_run_options_are_the_schema_s():
    assert tuple(EMITTED_FIELDS) == EMITTABLE
    assert output_columns() == OUTPUT_COLUMNS
    assert output_columns(TOKENS) == (*OUTPUT_COLUMNS, "token_ids")
    with pytest.raises(ValueError, match="choose from token_ids"):
        output_columns(("foo",))


def test_token_ids_sit_after_the_fixed_columns_before_passthrough():
    table = rows_to_table(_rows(), emit=TOKENS)
    assert table.column_names == [*OUTPUT_COLUMNS, "token_ids", "speaker"]
    assert table.schema.field("token_ids").type == IDS
    assert table.column("token_ids").to_pylist() == [[5, 7, 9], None, []]


def test_without_emit_the_table_is_what_it_was():
    table = rows_to_table(_rows())
    assert table.column_names == [*OUTPUT_COLUMNS, "speaker"]
    assert table.schema == output_schema(pa.schema([("speaker", pa.string())]))


def test_a_manifest_token_ids_column_is_renamed_only_when_emitted():
    assert passthrough_name("token_ids") == "token_ids"
    assert passthrough_name("token_ids", emit=TOKENS) == "input_token_ids"
    assert passthrough_name("words", emit=TOKENS) == "input_words"
    # unrenamed, it is an ordinary passthrough column of the manifest's type
    rows = [OutputRow(id="a", text="x", passthrough={"token_ids": "1 2"})]
    assert rows_to_table(rows).column("token_ids").to_pylist() == ["1 2"]
    with pytest.raises(ValueError, match="collides"):
        output_schema(pa.schema([("token_ids", pa.string())]), TOKENS)


def test_manifest_plan_renames_token_ids_only_when_emitted():
    from oasr.io.manifest_columns import ColumnMap, plan_columns

    names = ["id", "audio", "token_ids", "words"]
    plain = plan_columns("m", names, ColumnMap(), None).passthrough
    emitted = plan_columns("m", names, ColumnMap(emit=TOKENS), None).passthrough
    assert ("token_ids", "token_ids") in plain and ("words", "input_words") in plain
    assert ("token_ids", "input_token_ids") in emitted


def test_unify_keeps_the_emitted_column_typed_and_before_passthrough():
    old = output_schema(pa.schema([("speaker", pa.string())]))  # a part without the column
    new = rows_to_table(_rows(), emit=TOKENS).schema
    schema = unify_schemas([old, new], emit=TOKENS)
    assert schema.names == [*OUTPUT_COLUMNS, "token_ids", "speaker"]
    assert schema.field("token_ids").type == IDS
    conformed = conform_table(old.empty_table(), schema)
    assert conformed.schema.names == schema.names
    assert unify_schemas([old]).names == [*OUTPUT_COLUMNS, "speaker"]


def test_parquet_parts_merge_with_the_column(tmp_path: Path):
    out = tmp_path / "o.parquet"
    with OutputWriter(out, metadata={"model": "m"}, flush_rows=1, emit=TOKENS) as w:
        for row in _rows():
            w.write(row)
    table = pq.read_table(out)
    assert table.column_names == [*OUTPUT_COLUMNS, "token_ids", "speaker"]
    assert table.schema.field("token_ids").type == IDS
    assert dict(zip(table.column("id").to_pylist(), table.column("token_ids").to_pylist(),
                    strict=True)) == {"a": [5, 7, 9], "b": None, "c": []}
    assert pq.read_metadata(out).metadata[b"emit"] == b"token_ids"


def test_without_emit_no_column_and_no_metadata_key(tmp_path: Path):
    out = tmp_path / "o.parquet"
    with OutputWriter(out, metadata={"model": "m"}) as w:
        for row in _rows():
            w.write(row)
    assert "token_ids" not in pq.read_table(out).column_names
    assert b"emit" not in pq.read_metadata(out).metadata
    jsonl = tmp_path / "o.jsonl"
    with OutputWriter(jsonl, "jsonl") as w:
        w.write(_rows()[0])
    assert list(json.loads(jsonl.read_text())) == [*OUTPUT_COLUMNS, "speaker"]


def test_jsonl_carries_a_list_field(tmp_path: Path):
    out = tmp_path / "o.jsonl"
    with OutputWriter(out, "jsonl", emit=TOKENS) as w:
        for row in _rows():
            w.write(row)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["token_ids"] for r in rows] == [[5, 7, 9], None, []]
    assert list(rows[0]) == [*OUTPUT_COLUMNS, "token_ids", "speaker"]


def test_resume_keeps_the_column_and_refuses_other_columns(tmp_path: Path):
    for fmt in ("parquet", "jsonl"):
        out = tmp_path / f"o.{fmt}"
        rows = _rows()
        with OutputWriter(out, fmt, emit=TOKENS) as w:
            w.write(rows[0])
        w = OutputWriter(out, fmt, emit=TOKENS)
        assert w.done_ids() == {"a"}
        w.write(rows[1])
        w.abort()  # a part left behind, merged by the next run
        with OutputWriter(out, fmt, emit=TOKENS) as w:
            assert w.done_ids() == {"a", "b"}
            w.write(rows[2])
        if fmt == "parquet":
            got = pq.read_table(out).to_pylist()
        else:
            got = [json.loads(line) for line in out.read_text().splitlines()]
        assert {r["id"]: r["token_ids"] for r in got} == {"a": [5, 7, 9], "b": None, "c": []}
        with pytest.raises(OutputError, match="started with --emit token_ids"):
            OutputWriter(out, fmt).done_ids()
    plain = tmp_path / "plain.parquet"
    with OutputWriter(plain) as w:
        w.write(_rows()[0])
    with pytest.raises(OutputError, match="started without --emit.*--overwrite"):
        OutputWriter(plain, emit=TOKENS).previous_metadata()


def test_text_formats_refuse_the_column(tmp_path: Path):
    assert EMIT_FORMATS == ("parquet", "jsonl", "json")
    for fmt in ("txt", "srt", "vtt", "tsv", "txt-files"):
        with pytest.raises(OutputError, match="holds text only"):
            check_emit(fmt, TOKENS)
        check_emit(fmt, ())
    with pytest.raises(OutputError, match="--emit token_ids: a txt output"):
        OutputWriter(tmp_path / "o.txt", "txt", emit=TOKENS)
    with pytest.raises(OutputError, match="a srt output"):
        SubtitleWriter(tmp_path / "subs", "srt", emit=TOKENS)


def test_json_documents_and_stdout_carry_it(tmp_path: Path):
    import io

    with SubtitleWriter(tmp_path / "docs", "json", emit=TOKENS) as w:
        w.write(_rows()[0])
    doc = json.loads((tmp_path / "docs" / "a.json").read_text())
    assert doc["token_ids"] == [5, 7, 9] and list(doc)[-1] == "token_ids"
    with SubtitleWriter(tmp_path / "plain", "json") as w:
        w.write(_rows()[0])
    assert "token_ids" not in json.loads((tmp_path / "plain" / "a.json").read_text())
    buf = io.StringIO()
    StdoutWriter(buf, emit=TOKENS).write(_rows()[1])
    StdoutWriter(buf).write(_rows()[0])
    first, second = (json.loads(line) for line in buf.getvalue().splitlines())
    assert first["token_ids"] is None and "token_ids" not in second
