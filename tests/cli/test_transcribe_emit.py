"""``oasr transcribe --emit token_ids``: the column on a real run (the tiny random Whisper), the
ids the API returns for the same clips, absent without the flag, null on an error row, JSONL,
resume, and the flags it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.io.schema import OUTPUT_COLUMNS
from tests.transcribe.conftest import clip

SHORT = ("1688-142285-0002", "1688-142285-0003")
runner = CliRunner()

pytestmark = pytest.mark.usefixtures("one_thread")


def run(bundle: Path, *args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--model", str(bundle),
                               "--device", "cpu", "--no-progress"])


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """Two clips, an unreadable file and digital silence; a manifest column named token_ids."""
    import numpy as np
    import soundfile as sf

    root = tmp_path_factory.mktemp("emit")
    (root / "broken.flac").write_bytes(b"not audio\n" * 50)
    sf.write(root / "quiet.wav", np.zeros(3 * 16000, dtype="float32"), 16000)
    rows = [{"id": "a", "audio": str(clip(SHORT[0])), "token_ids": "from the manifest"},
            {"id": "b", "audio": "broken.flac", "token_ids": None},
            {"id": "c", "audio": str(clip(SHORT[1])), "token_ids": "c's"},
            {"id": "q", "audio": "quiet.wav", "token_ids": None}]
    path = root / "m.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="module")
def api_ids(bundle) -> dict[str, list[int]]:
    import oasr

    model = oasr.load(str(bundle), device="cpu", threads=1)
    a, c = model.transcribe_batch([clip(SHORT[0]), clip(SHORT[1])])
    return {"a": a.token_ids, "c": c.token_ids}


def test_parquet_column_equals_the_api_s_ids(bundle, manifest, api_ids, tmp_path):
    out = tmp_path / "o.parquet"
    res = run(bundle, manifest, "-o", out, "--emit", "token_ids")
    assert res.exit_code == 0, res.output
    table = pq.read_table(out)
    assert table.column_names == [*OUTPUT_COLUMNS, "token_ids", "audio", "input_token_ids"]
    assert table.schema.field("token_ids").type == pa.list_(pa.int32())
    rows = {r["id"]: r for r in table.to_pylist()}
    assert api_ids["a"] and api_ids["c"]  # the random model decodes something
    assert rows["a"]["token_ids"] == api_ids["a"] and rows["c"]["token_ids"] == api_ids["c"]
    assert rows["b"]["error"] and rows["b"]["token_ids"] is None
    assert rows["q"]["finish_reason"] == "no_speech" and rows["q"]["token_ids"] == []
    # the manifest's own token_ids column passes through, renamed as a fixed column's is
    assert rows["a"]["input_token_ids"] == "from the manifest"
    assert pq.read_metadata(out).metadata[b"emit"] == b"token_ids"


def test_absent_without_the_flag(bundle, manifest, tmp_path):
    out = tmp_path / "o.parquet"
    res = run(bundle, manifest, "-o", out)
    assert res.exit_code == 0, res.output
    table = pq.read_table(out)
    # the manifest column passes through under its own name; no column is added
    assert table.column_names == [*OUTPUT_COLUMNS, "audio", "token_ids"]
    assert table.schema.field("token_ids").type == pa.string()
    assert b"emit" not in pq.read_metadata(out).metadata


def test_jsonl_and_stdout_carry_a_list(bundle, manifest, api_ids, tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    res = run(bundle, manifest, "-o", out, "--emit", "token_ids", "--limit", "2")
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["a"]["token_ids"] == api_ids["a"] and rows["b"]["token_ids"] is None
    assert list(rows["a"]) == [*OUTPUT_COLUMNS, "token_ids", "audio", "input_token_ids"]
    monkeypatch.chdir(tmp_path)
    res = run(bundle, clip(SHORT[0]), "-o", "-", "--emit", "token_ids")
    assert res.exit_code == 0, res.output
    row = next(json.loads(line) for line in res.stdout.splitlines() if line.startswith("{"))
    assert row["token_ids"] == api_ids["a"]


def test_resume_keeps_the_column(bundle, manifest, api_ids, tmp_path):
    out = tmp_path / "o.parquet"
    res = run(bundle, manifest, "-o", out, "--emit", "token_ids", "--limit", "1")
    assert res.exit_code == 0, res.output
    res = run(bundle, manifest, "-o", out, "--emit", "token_ids")
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r["token_ids"] for r in pq.read_table(out).to_pylist()}
    assert rows == {"a": api_ids["a"], "b": None, "c": api_ids["c"], "q": []}
    res = run(bundle, manifest, "-o", out)  # a resume without the column is refused
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert "started with --emit token_ids" in said and "--overwrite" in said


def test_bad_values_and_text_formats_are_refused(bundle, tmp_path):
    res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "o.parquet", "--emit", "foo")
    assert res.exit_code == 2
    assert "--emit foo: not a column" in res.output and "token_ids" in res.output
    res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "o.txt", "--emit", "token_ids")
    assert res.exit_code == 2
    assert "holds text only" in " ".join(res.output.split())
    assert not (tmp_path / "o.txt").exists()
    # repeated and comma-separated both parse (and say the same once)
    from oasr.cli.transcribe import run_options

    assert run_options({"emit": ["token_ids", "token_ids,"]}).output.emit == ("token_ids",)


def test_json_document_carries_it(bundle, api_ids, tmp_path):
    res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "talk.json", "--emit", "token_ids")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "talk.json").read_text())["token_ids"] == api_ids["a"]
