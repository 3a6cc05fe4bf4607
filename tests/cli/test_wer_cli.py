"""``oasr wer``: report, --json shape, file formats, missing/errored ids, --strict and the gate."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from oasr.cli.wer import wer_command

runner = CliRunner()


def _local_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:  # a callback keeps "wer" a subcommand, as in the real app
        pass

    app.command("wer")(wer_command)
    return app


LOCAL = _local_app()


def run(*args, app=LOCAL):
    return runner.invoke(app, ["wer", *map(str, args)])


def write(path, rows):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        cols = list(rows[0])
        body = ["\t".join("" if r[c] is None else str(r[c]) for c in cols) for r in rows]
        path.write_text("\n".join(["\t".join(cols), *body]) + "\n", encoding="utf-8")
    return path


REF = [{"id": "u1", "text": "The cat sat on the mat."}, {"id": "u2", "text": "Hello world"}]
HYP = [{"id": "u1", "text": "the cat sit on mat"}, {"id": "u2", "text": "hello world"}]


@pytest.fixture
def files(tmp_path):
    return write(tmp_path / "ref.jsonl", REF), write(tmp_path / "hyp.jsonl", HYP)


def test_text_report(files):
    res = run(*files)
    assert res.exit_code == 0, res.output
    # 1 substitution + 1 deletion over 8 reference words
    assert "WER 25.00%" in res.stdout
    assert "S 1, D 1, I 0; 8 reference words" in res.stdout
    assert "normalizer whisper" in res.stdout
    assert "u1" in res.stdout and "the cat sit on mat" in res.stdout
    assert "u2" not in res.stdout  # a perfect utterance is not among the worst


def test_json_is_one_object_with_the_documented_fields(files):
    res = run(*files, "--json")
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)  # exactly one JSON document, nothing else on stdout
    assert isinstance(obj, dict)
    assert obj["wer"] == pytest.approx(2 / 8)
    assert (obj["substitutions"], obj["deletions"], obj["insertions"]) == (1, 1, 0)
    assert obj["ref_words"] == 8 and obj["utterances"] == 2
    assert obj["missing_ids"] == [] and obj["normalizer"] == "whisper"
    assert 0.0 < obj["cer"] < 1.0
    assert obj["gate"] is None
    assert [w["id"] for w in obj["worst"]] == ["u1"]


@pytest.mark.parametrize("ref_ext,hyp_ext", [(".parquet", ".tsv"), (".tsv", ".jsonl"),
                                             (".jsonl", ".parquet")])
def test_formats_give_the_same_result(tmp_path, files, ref_ext, hyp_ext):
    ref = write(tmp_path / f"r{ref_ext}", REF)
    hyp = write(tmp_path / f"h{hyp_ext}", HYP)
    got = json.loads(run(ref, hyp, "--json").stdout)
    want = json.loads(run(*files, "--json").stdout)
    for k in ("wer", "cer", "substitutions", "deletions", "insertions", "ref_words"):
        assert got[k] == want[k]


def test_custom_columns_and_normalizer(tmp_path):
    ref = write(tmp_path / "r.parquet", [{"key": "a", "sentence": "Hello, World"}])
    hyp = write(tmp_path / "h.jsonl", [{"key": "a", "out": "hello world"}])
    args = (ref, hyp, "--id-column", "key", "--ref-text-column", "sentence",
            "--hyp-text-column", "out", "--json")
    assert json.loads(run(*args).stdout)["wer"] == 0.0
    none = json.loads(run(*args, "--normalizer", "none").stdout)
    assert none["wer"] == pytest.approx(1.0) and none["normalizer"] == "none"


def test_missing_errored_and_extra_ids(tmp_path):
    ref = write(tmp_path / "r.jsonl", [{"id": "a", "text": "red green"},
                                       {"id": "b", "text": "blue pink grey"},
                                       {"id": "c", "text": "black"}])
    hyp = write(tmp_path / "h.jsonl", [{"id": "a", "text": "red green", "error": None},
                                       {"id": "c", "text": None, "error": "oom"},
                                       {"id": "z", "text": "x", "error": None}])
    obj = json.loads(run(ref, hyp, "--json").stdout)
    assert obj["missing_ids"] == ["b"] and obj["error_ids"] == ["c"] and obj["extra_ids"] == ["z"]
    assert obj["deletions"] == 4 and obj["wer"] == pytest.approx(4 / 6)
    text = run(ref, hyp).stdout
    assert "1 REF ids have no hypothesis, scored as deleted: b" in text
    assert "c (oom)" in text and "not in REF, ignored: z" in text


def test_strict_refuses_missing_ids(tmp_path, files):
    hyp = write(tmp_path / "h.jsonl", HYP[:1])
    res = run(files[0], hyp, "--strict")
    assert res.exit_code == 2
    assert "u2" in res.stderr and "--strict" in res.stderr
    assert run(*files, "--strict").exit_code == 0


def test_bad_input_exits_2_naming_the_file_and_the_fix(tmp_path, files):
    ref = write(tmp_path / "r.tsv", [{"id": "a", "sentence": "x"}])
    res = run(ref, files[1])
    assert res.exit_code == 2
    assert str(ref) in res.stderr and "available columns: id, sentence" in res.stderr
    assert "--ref-text-column" in res.stderr
    res = run(files[0], files[1], "--id-column", "key")
    assert res.exit_code == 2 and "--id-column" in res.stderr

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = run(empty, files[1])
    assert res.exit_code == 2 and "has no rows" in res.stderr and str(empty) in res.stderr

    res = run(tmp_path / "r.csv", files[1])
    assert res.exit_code == 2 and "rename it" in res.stderr

    res = run(*files, "--normalizer", "shouty")
    assert res.exit_code == 2 and "valid: basic, none, whisper" in res.stderr

    blank = write(tmp_path / "blank.jsonl", [{"id": "u1", "text": "[noise]"}])
    res = run(blank, files[1])
    assert res.exit_code == 2 and "empty after" in res.stderr


def _gate(tmp_path, **entry):
    g = tmp_path / "gate.json"
    base = {"error_rate_pct": 25.0, "tolerance_pct": 0.3, "metric": "wer",
            "normalizer": "whisper"}
    g.write_text(json.dumps({"K": {**base, **entry}}))
    return g


def test_gate_passes(tmp_path, files):
    res = run(*files, "--gate", _gate(tmp_path), "--key", "K")
    assert res.exit_code == 0, res.output
    assert "WER 25.00% is within the recorded 25.00% + tolerance 0.30% for key K" in res.stdout


def test_gate_fails_with_exit_1(tmp_path, files):
    res = run(*files, "--gate", _gate(tmp_path, error_rate_pct=20.0), "--key", "K")
    assert res.exit_code == 1
    assert "WER 25.00% exceeds the recorded 20.00% + tolerance 0.30% for key K" in res.stderr
    res = run(*files, "--gate", _gate(tmp_path, error_rate_pct=20.0), "--key", "K", "--json")
    assert res.exit_code == 1
    obj = json.loads(res.stdout)
    assert obj["gate"]["passed"] is False and obj["gate"]["measured_pct"] == pytest.approx(25.0)


def test_gate_uses_the_entry_metric(tmp_path, files):
    cer = json.loads(run(*files, "--json").stdout)["cer"] * 100
    res = run(*files, "--gate", _gate(tmp_path, metric="cer", error_rate_pct=cer - 1,
                                      tolerance_pct=0.5), "--key", "K")
    assert res.exit_code == 1 and res.stderr.startswith("CER ")


def test_gate_normalizer_mismatch_refused(tmp_path, files):
    res = run(*files, "--gate", _gate(tmp_path, normalizer="basic"), "--key", "K")
    assert res.exit_code == 2 and "--normalizer basic" in res.stderr


def test_gate_flag_combinations(tmp_path, files):
    g = _gate(tmp_path)
    assert run(*files, "--gate", g).exit_code == 2
    assert run(*files, "--key", "K").exit_code == 2
    assert run(*files, "--record").exit_code == 2
    res = run(*files, "--gate", g, "--key", "nope")
    assert res.exit_code == 2 and "keys: K" in res.stderr


def test_record_writes_then_gate_passes(tmp_path, files):
    g = tmp_path / "ci" / "wer-reference.json"
    res = run(*files, "--gate", g, "--key", "tiny", "--record")
    assert res.exit_code == 0, res.output
    data = json.loads(g.read_text())
    assert data["tiny"] == {"error_rate_pct": 25.0, "tolerance_pct": 0.3, "metric": "wer",
                            "normalizer": "whisper"}
    assert run(*files, "--gate", g, "--key", "tiny").exit_code == 0

    # a worse run fails the recorded gate; re-recording keeps the tolerance and the note
    data["tiny"].update(error_rate_pct=10.0, tolerance_pct=1.0, note="keep me")
    g.write_text(json.dumps(data))
    assert run(*files, "--gate", g, "--key", "tiny").exit_code == 1
    assert run(*files, "--gate", g, "--key", "tiny", "--record").exit_code == 0
    assert json.loads(g.read_text())["tiny"] == {
        "error_rate_pct": 25.0, "tolerance_pct": 1.0, "metric": "wer", "normalizer": "whisper",
        "note": "keep me"}


def test_worst_limits_the_table(tmp_path):
    ref = write(tmp_path / "r.jsonl", [{"id": f"id{k}", "text": "a b c d"} for k in range(4)])
    hyp = write(tmp_path / "h.jsonl", [{"id": f"id{k}", "text": " ".join("abcd"[k:])}
                                       for k in range(4)])
    obj = json.loads(run(ref, hyp, "--json", "--worst", "2").stdout)
    assert [w["id"] for w in obj["worst"]] == ["id3", "id2"]
    text = run(ref, hyp, "--worst", "0").stdout
    assert "worst" not in text and "id3" not in text


def test_registered_in_the_oasr_app(files):
    from oasr.cli.app import app

    res = run(*files, "--json", app=app)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["wer"] == pytest.approx(2 / 8)
    help_res = runner.invoke(app, ["wer", "--help"])
    assert help_res.exit_code == 0 and "--gate" in help_res.stdout


# ----------------------------------------------------------------------------- encodings


@pytest.fixture
def accented(tmp_path):
    """A UTF-8 reference and the same text as a Latin-1 hypothesis (é is one byte, 0xe9)."""
    ref = tmp_path / "ref.tsv"
    ref.write_text("id\ttext\nu1\tle café est noir\nu2\tdéjà vu\n", encoding="utf-8")
    hyp = tmp_path / "hyp.txt"
    hyp.write_bytes("u1\tle café est noir\nu2\tdéjà vu\n".encode("latin-1"))
    return ref, hyp


def test_a_file_not_in_the_encoding_is_one_line_naming_the_byte_and_the_flag(accented):
    ref, hyp = accented
    res = run(ref, hyp, "--normalizer", "none")
    assert res.exit_code == 2
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = res.output.strip().splitlines()
    assert lines == [f"error: HYP {hyp}: line 1 is not utf-8 (byte 0xe9 at offset 9); pass "
                     "--encoding with the file's encoding (e.g. --encoding latin-1 or cp1252)"]


def test_encoding_reads_latin1_and_utf16(accented, tmp_path):
    ref, hyp = accented
    res = run(ref, hyp, "--normalizer", "none", "--encoding", "latin-1", "--json")
    # The UTF-8 reference read as Latin-1 would not match: --encoding applies to both files.
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["wer"] > 0
    ref16 = tmp_path / "ref16.tsv"
    ref16.write_text(ref.read_text(encoding="utf-8"), encoding="utf-16")  # with a BOM
    hyp16 = tmp_path / "hyp16.txt"
    hyp16.write_text(hyp.read_text(encoding="latin-1"), encoding="utf-16")
    res = run(ref16, hyp16, "--encoding", "utf-16", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["wer"] == 0.0


def test_an_unknown_encoding_is_refused_in_one_line(accented):
    ref, hyp = accented
    res = run(ref, hyp, "--encoding", "klingon")
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "error: REF unknown encoding 'klingon'; pass a Python codec name such as utf-8, "
        "latin-1, cp1252 or utf-16"]
