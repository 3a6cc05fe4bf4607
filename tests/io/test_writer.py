"""Output writing: formats, schema, metadata, crash-safe parts, resume, retries, atomicity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oasr.io import writer as writer_module
from oasr.io.schema import OUTPUT_COLUMNS, output_schema
from oasr.io.writer import OutputError, OutputRow, OutputWriter, resolve_output_path

META = {
    "oasr_version": "0.1.0",
    "model": "whisper-tiny.en",
    "model_hash": "abc123",
    "decode_method": "greedy_search",
    "decode_options": '{"beam": 1}',
}


def _row(i: int, error: str | None = None, **passthrough) -> OutputRow:
    if error is not None:
        return OutputRow(
            id=f"u{i:03d}", error=error, finish_reason="error", passthrough=passthrough
        )
    return OutputRow(
        id=f"u{i:03d}",
        text=f"text {i}",
        words=[
            {"word": "text", "start": 0.1 * i, "end": 0.1 * i + 0.3, "confidence": 0.9},
            {"word": str(i), "start": 0.5, "end": 0.7, "confidence": None},
        ],
        segments=[{"start": 0.0, "end": 0.7, "text": f"text {i}"}],
        confidence=0.8,
        duration=1.25,
        language="en",
        finish_reason="eos",
        passthrough=passthrough,
    )


def test_parquet_round_trip_schema_and_metadata(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with OutputWriter(out, "parquet", META, flush_rows=2) as w:
        for i in range(5):
            w.write(_row(i, speaker=i * 10))
        w.write(_row(5, error="cannot decode audio: bad header", speaker=50))
    assert not Path(f"{out}.parts").exists()
    table = pq.read_table(out)
    assert table.schema.names == [*OUTPUT_COLUMNS, "speaker"]
    expected = output_schema(pa.schema([("speaker", pa.int64())]))
    assert table.schema.remove_metadata().equals(expected, check_metadata=False)
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [f"u{i:03d}" for i in range(6)]
    assert rows[3]["words"][0] == {
        "word": "text",
        "start": pytest.approx(0.3),
        "end": pytest.approx(0.6),
        "confidence": 0.9,
    }
    assert rows[3]["segments"] == [{"start": 0.0, "end": 0.7, "text": "text 3"}]
    assert rows[3]["speaker"] == 30 and rows[3]["error"] is None
    assert rows[5]["error"] == "cannot decode audio: bad header" and rows[5]["text"] is None
    kv = pq.read_metadata(out).metadata
    for key, value in META.items():
        assert kv[key.encode()] == value.encode()


def test_final_file_has_row_groups(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(writer_module, "ROW_GROUP_ROWS", 10)
    out = tmp_path / "out.parquet"
    with OutputWriter(out, "parquet", META, flush_rows=4) as w:
        for i in range(35):
            w.write(_row(i))
    meta = pq.read_metadata(out)
    assert meta.num_rows == 35 and meta.num_row_groups == 4


def test_resume_after_crash(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    w = OutputWriter(out, "parquet", META, flush_rows=10)
    for i in range(45):
        w.write(_row(i))
    # Crash: no close. Four parts are on disk, the five buffered rows are lost.
    assert not out.exists()
    del w
    w2 = OutputWriter(out, "parquet", META, flush_rows=10)
    done = w2.done_ids()
    assert done == {f"u{i:03d}" for i in range(40)}
    for i in range(100):
        if f"u{i:03d}" not in done:
            w2.write(_row(i))
    w2.close()
    ids = pq.read_table(out, columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == [f"u{i:03d}" for i in range(100)]  # none missing, none twice
    assert not Path(f"{out}.parts").exists()
    # A third run over the finished output has nothing left to do.
    assert OutputWriter(out, "parquet", META).done_ids() == set(ids)


def test_resume_after_sigkill(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    script = (
        "import os, signal\n"
        "from oasr.io.writer import OutputRow, OutputWriter\n"
        f"w = OutputWriter({str(out)!r}, 'parquet', {{}}, flush_rows=3)\n"
        "for i in range(8):\n"
        "    w.write(OutputRow(id=f'k{i}', text='t'))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2])
    assert proc.returncode == -signal.SIGKILL
    w = OutputWriter(out, "parquet", {})
    assert w.done_ids() == {f"k{i}" for i in range(6)}  # two whole parts survive
    for i in range(6, 8):
        w.write(OutputRow(id=f"k{i}", text="t"))
    w.close()
    assert sorted(pq.read_table(out).column("id").to_pylist()) == [f"k{i}" for i in range(8)]


def test_rerun_appends_to_finished_output(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with OutputWriter(out, "parquet", {"model": "old"}) as w:
        for i in range(3):
            w.write(_row(i))
    with OutputWriter(out, "parquet", {"model": "new"}) as w:
        assert w.previous_metadata() == {"model": "old"}
        w.write(_row(3))
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == ["u000", "u001", "u002", "u003"]
    assert pq.read_metadata(out).metadata[b"model"] == b"new"  # the merge keeps new metadata


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "txt"])
def test_retry_errors_replaces_error_rows(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"out.{fmt}"
    with OutputWriter(out, fmt, META) as w:
        w.write(_row(0))
        w.write(_row(1, error="decoder ran out of memory"))
        w.write(_row(2))
    assert OutputWriter(out, fmt, META).done_ids() == {"u000", "u001", "u002"}
    w = OutputWriter(out, fmt, META, retry_errors=True)
    assert w.done_ids() == {"u000", "u002"}
    w.write(_row(1))
    w.close()
    if fmt == "parquet":
        rows = pq.read_table(out).to_pylist()
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        rows = [
            dict(zip(("id", "text"), line.split("\t"), strict=True))
            for line in out.read_text().splitlines()
        ]
    assert sorted(r["id"] for r in rows) == ["u000", "u001", "u002"]
    retried = next(r for r in rows if r["id"] == "u001")
    assert retried["text"] == "text 1"
    assert retried.get("error") is None
    assert OutputWriter(out, fmt, META, retry_errors=True).done_ids() == {"u000", "u001", "u002"}


def test_jsonl_format(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with OutputWriter(out, "jsonl", META, flush_rows=2) as w:
        w.write(_row(0, note="a"))
        w.write(_row(1, error="bad file"))
        w.write(OutputRow(id="nan", text="x", confidence=float("nan")))
    objs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [o["id"] for o in objs] == ["u000", "u001", "nan"]
    assert list(objs[0])[: len(OUTPUT_COLUMNS)] == list(OUTPUT_COLUMNS)
    assert objs[0]["note"] == "a" and objs[0]["words"][1]["word"] == "0"
    assert objs[1]["error"] == "bad file" and objs[1]["text"] is None
    assert objs[2]["confidence"] is None  # strict JSON: no NaN


def test_txt_format(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with OutputWriter(out, "txt", META) as w:
        w.write(OutputRow(id="a", text="hello\tworld\nagain"))
        w.write(OutputRow(id="b", error="audio path does not exist: /x.wav"))
        w.write(OutputRow(id="c", text=None))
    assert out.read_text().splitlines() == [
        "a\thello world again",
        "b\tERROR: audio path does not exist: /x.wav",
        "c\t",
    ]
    with OutputWriter(out, "txt", META) as w:
        assert w.done_ids() == {"a", "b", "c"}
        w.write(OutputRow(id="d", text="more"))
    assert out.read_text().splitlines()[-1] == "d\tmore"
    assert len(out.read_text().splitlines()) == 4


def test_no_partial_final_file_on_failure(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out.parquet"
    with OutputWriter(out, "parquet", META) as w:
        w.write(_row(0))
    before = out.read_bytes()

    def failing_merge(self, parts, f):
        f.write(b"PAR1 half a file")
        raise OSError("disk full")

    w = OutputWriter(out, "parquet", META)
    w.write(_row(1))
    monkeypatch.setattr(OutputWriter, "_merge", failing_merge)
    with pytest.raises(OutputError, match="disk full; kept: 1 finished row in 1 part file in "
                       ".* and the earlier output .* as it was; nothing was lost"):
        w.close()
    assert out.read_bytes() == before  # the old output, untouched
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    monkeypatch.undo()
    # The parts survived: the next run still has the row and finishes the merge.
    w = OutputWriter(out, "parquet", META)
    assert w.done_ids() == {"u000", "u001"}
    w.close()
    assert pq.read_table(out).column("id").to_pylist() == ["u000", "u001"]


def test_context_manager_aborts_on_exception(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with pytest.raises(KeyboardInterrupt), OutputWriter(out, "parquet", META) as w:
        w.write(_row(0))
        raise KeyboardInterrupt
    assert not out.exists()  # no merge on abort
    assert OutputWriter(out, "parquet", META).done_ids() == {"u000"}  # but the row was kept
    with pytest.raises(OutputError, match="closed"):
        w.write(_row(1))


def test_passthrough_types_unify_across_parts(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with OutputWriter(out, "parquet", META, flush_rows=2) as w:
        # Part 1: speaker all null (null type), tag an int. Part 2: speaker int, tag a string.
        w.write(_row(0, speaker=None, tag=1))
        w.write(_row(1, speaker=None, tag=2))
        w.write(_row(2, speaker=7, tag="x", extra=True))
        w.write(_row(3, speaker=8, tag="y", extra=False))
    table = pq.read_table(out)
    assert table.schema.field("speaker").type == pa.int64()
    assert table.schema.field("tag").type == pa.string()
    assert table.schema.field("extra").type == pa.bool_()
    assert table.column("speaker").to_pylist() == [None, None, 7, 8]
    assert table.column("tag").to_pylist() == ["1", "2", "x", "y"]
    assert table.column("extra").to_pylist() == [None, None, True, False]


def test_declared_passthrough_schema_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    declared = pa.schema([("score", pa.float32())])
    with OutputWriter(out, "parquet", META, passthrough_schema=declared) as w:
        w.write(_row(0, score=None))
    assert pq.read_schema(out).field("score").type == pa.float32()
    with pytest.raises(ValueError, match="collides"):
        OutputWriter(out, "parquet", META, passthrough_schema=pa.schema([("text", pa.string())]))


def test_empty_run_writes_an_empty_output(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "out.parquet"
    OutputWriter(out, "parquet", META).close()
    table = pq.read_table(out)
    assert table.num_rows == 0 and table.schema.names == list(OUTPUT_COLUMNS)


def test_resolve_output_path(tmp_path: Path) -> None:
    manifest = tmp_path / "data" / "train.parquet"
    manifest.parent.mkdir()
    manifest.touch()
    outdir = tmp_path / "out"
    outdir.mkdir()
    assert resolve_output_path(str(outdir), [str(manifest)], "parquet") == outdir / "train.parquet"
    assert (
        resolve_output_path(f"{tmp_path}/new/", [str(manifest)], "jsonl")
        == tmp_path / "new" / "train.jsonl"
    )
    assert (
        resolve_output_path(str(tmp_path / "x.txt"), [str(manifest)], "txt") == tmp_path / "x.txt"
    )
    assert (
        resolve_output_path(str(outdir), [str(manifest)], "parquet", shard=(2, 8))
        == outdir / "train.shard-2-of-8.parquet"
    )
    assert (
        resolve_output_path(str(outdir), [str(tmp_path / "data" / "*.parquet")], "parquet")
        == outdir / "transcripts.parquet"
    )
    # Writing next to the manifest must not overwrite it.
    assert (
        resolve_output_path(str(manifest.parent), [str(manifest)], "parquet")
        == manifest.parent / "train.oasr.parquet"
    )
    with pytest.raises(OutputError, match="unknown output format"):
        resolve_output_path(str(outdir), [str(manifest)], "csv")


def test_part_files_are_atomic_and_numbered(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    w = OutputWriter(out, "parquet", META, flush_rows=2)
    for i in range(5):
        w.write(_row(i))
    w.abort()
    parts = sorted(os.listdir(f"{out}.parts"))
    assert parts == ["part-000001.parquet", "part-000002.parquet", "part-000003.parquet"]
    # A resumed writer continues the numbering, so its parts sort as newer.
    w = OutputWriter(out, "parquet", META, flush_rows=1)
    w.write(_row(0, error="retry me later"))
    w.abort()
    assert sorted(os.listdir(f"{out}.parts"))[-1] == "part-000004.parquet"
    with OutputWriter(out, "parquet", META) as w:
        pass
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == ["u001", "u002", "u003", "u004", "u000"]
    assert table.column("error").to_pylist()[-1] == "retry me later"  # newest row wins
