"""Reading transcript tables: the three formats agree, and bad input names the file and the fix."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oasr.metrics.tables import MissingColumnError, TableError, read_transcripts

ROWS = [
    {"id": "a", "text": "hello world", "error": None},
    {"id": "b", "text": "", "error": "decode failed"},
    {"id": "c", "text": "third one", "error": None},
]


def write_rows(path, rows):
    """Write ``rows`` (dicts with the same keys) in the format named by ``path``'s extension."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".tsv":
        cols = list(rows[0])
        lines = ["\t".join(cols)]
        lines += ["\t".join("" if r[c] is None else str(r[c]) for c in cols) for r in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        raise AssertionError(path)
    return path


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".tsv"])
def test_formats_read_the_same(tmp_path, ext):
    t = read_transcripts(write_rows(tmp_path / f"h{ext}", ROWS), error_column="error",
                         allow_null_text=True)
    assert t.texts == {"a": "hello world", "b": "", "c": "third one"}
    assert list(t.texts) == ["a", "b", "c"]
    assert t.errors == {"b": "decode failed"}
    assert set(t.columns) == {"id", "text", "error"}


def test_custom_columns_and_integer_ids_join_as_strings(tmp_path):
    rows = [{"utt": 7, "sentence": "x"}, {"utt": 8, "sentence": "y"}]
    p = write_rows(tmp_path / "r.parquet", rows)
    t = read_transcripts(p, id_column="utt", text_column="sentence")
    assert t.texts == {"7": "x", "8": "y"}
    j = read_transcripts(write_rows(tmp_path / "r.jsonl", rows), id_column="utt",
                         text_column="sentence")
    assert j.texts == t.texts


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".tsv"])
def test_missing_column_lists_available_columns(tmp_path, ext):
    p = write_rows(tmp_path / f"r{ext}", [{"id": "a", "sentence": "x"}])
    with pytest.raises(MissingColumnError) as info:
        read_transcripts(p, text_column="text")
    e = info.value
    assert e.role == "text" and e.column == "text"
    assert str(p) in str(e) and "sentence" in str(e) and "id" in str(e)
    with pytest.raises(MissingColumnError) as info:
        read_transcripts(p, id_column="key", text_column="sentence")
    assert info.value.role == "id"


def test_duplicate_ids_refused(tmp_path):
    p = write_rows(tmp_path / "r.jsonl", [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
    with pytest.raises(TableError, match=r"duplicate ids.*\ba\b"):
        read_transcripts(p)


def test_null_text_refused_unless_allowed(tmp_path):
    p = write_rows(tmp_path / "r.parquet", [{"id": "a", "text": None}, {"id": "b", "text": "y"}])
    with pytest.raises(TableError, match="null 'text'"):
        read_transcripts(p)
    assert read_transcripts(p, allow_null_text=True).texts == {"a": "", "b": "y"}


def test_bad_files(tmp_path):
    with pytest.raises(TableError, match="rename it"):
        read_transcripts(tmp_path / "r.csv")
    with pytest.raises(TableError, match="no such file"):
        read_transcripts(tmp_path / "absent.jsonl")
    bad_json = tmp_path / "b.jsonl"
    bad_json.write_text('{"id": "a", "text": "x"}\n{oops\n')
    with pytest.raises(TableError, match="line 2 is not valid JSON"):
        read_transcripts(bad_json)
    bad_tsv = tmp_path / "b.tsv"
    bad_tsv.write_text("id\ttext\na\tx\ty\n")
    with pytest.raises(TableError, match="line 2 has 3 tab-separated fields"):
        read_transcripts(bad_tsv)
    not_parquet = tmp_path / "n.parquet"
    not_parquet.write_bytes(b"not parquet at all")
    with pytest.raises(TableError, match="not a readable Parquet file"):
        read_transcripts(not_parquet)
    numbers = write_rows(tmp_path / "num.parquet", [{"id": "a", "text": 3}])
    with pytest.raises(TableError, match="not strings"):
        read_transcripts(numbers)


def test_tsv_keeps_quotes_literal(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_text('id\ttext\na\t"quoted" words\n\n', encoding="utf-8")
    assert read_transcripts(p).texts == {"a": '"quoted" words'}


def test_empty_files_have_no_rows(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    (tmp_path / "e.tsv").write_text("id\ttext\n")
    assert read_transcripts(tmp_path / "e.jsonl").texts == {}
    assert read_transcripts(tmp_path / "e.tsv").texts == {}


def test_txt_layout_of_oasr_transcribe_reads_with_its_error_rows(tmp_path):
    from oasr.metrics.tables import read_transcripts

    path = tmp_path / "hyp.txt"
    path.write_text("a\thello world\nb\tERROR: b.wav: cannot decode\n\nc\t\n", encoding="utf-8")
    t = read_transcripts(path, error_column="error", allow_null_text=True)
    assert t.texts == {"a": "hello world", "b": "", "c": ""}
    assert t.errors == {"b": "b.wav: cannot decode"}
