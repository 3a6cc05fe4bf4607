"""``oasr transcribe`` outputs as a new user writes them: -o's extension, -o -, json/tsv, txt
read back by ``oasr wer``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.transcribe.conftest import clip

SHORT = ("1688-142285-0002", "1688-142285-0003")
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")



def run(bundle: Path, *args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--model", str(bundle),
                               "--no-progress"])


def test_jsonl_extension_writes_jsonl_not_parquet(bundle, tmp_path):
    out = tmp_path / "o.jsonl"
    res = run(bundle, clip(SHORT[0]), clip(SHORT[1]), "-o", out)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(SHORT)


def test_format_contradicting_the_extension_is_refused(bundle, tmp_path):
    res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "o.jsonl", "-f", "parquet")
    assert res.exit_code == 2
    assert "but --format is parquet" in " ".join(res.output.split())
    assert not (tmp_path / "o.jsonl").exists()


def test_dash_streams_jsonl_to_stdout_and_creates_no_file(bundle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run(bundle, clip(SHORT[0]), clip(SHORT[1]), "-o", "-")
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "-").exists()
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["id"] for r in rows) == sorted(SHORT)
    assert all(r["text"] for r in rows)


def test_json_and_tsv_one_file_per_recording(bundle, tmp_path):
    res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "talk.json")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "talk.json").read_text())
    assert set(doc) >= {"text", "segments", "language"} and doc["segments"][0]["text"]
    res = run(bundle, clip(SHORT[0]), clip(SHORT[1]), "-o", tmp_path / "tsv/", "-f", "tsv")
    assert res.exit_code == 0, res.output
    lines = (tmp_path / "tsv" / f"{SHORT[1]}.tsv").read_text().splitlines()
    assert lines[0] == "start\tend\ttext" and len(lines) == 2


def test_txt_is_read_back_by_wer(bundle, tmp_path):
    out = tmp_path / "o.txt"
    assert run(bundle, clip(SHORT[0]), clip(SHORT[1]), "-o", out).exit_code == 0
    ref = tmp_path / "ref.tsv"
    hyp_rows = dict(line.split("\t", 1) for line in out.read_text().splitlines())
    ref.write_text("id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t in hyp_rows.items()))
    res = runner.invoke(app, ["wer", str(ref), str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["wer"] == 0.0


def test_parquet_times_are_rounded_to_milliseconds(bundle, tmp_path):
    import numpy as np
    import soundfile as sf

    pieces = [sf.read(clip(c), dtype="float32")[0] for c in SHORT * 2]
    long = tmp_path / "long.wav"
    sf.write(long, np.concatenate(pieces), 16000)
    out = tmp_path / "o.parquet"
    # Unconditioned, so the random tiny model writes a segment in every window.
    assert run(bundle, long, "-o", out, "--no-condition-on-previous-text").exit_code == 0
    segments = pq.read_table(out).column("segments").to_pylist()[0]
    assert len(segments) > 1
    assert all(s["start"] == round(s["start"], 3) and s["end"] == round(s["end"], 3)
               for s in segments)


def test_nemo_manifest_round_trips_and_wer_joins_on_audio_filepath(bundle, tmp_path):
    import soundfile as sf

    (tmp_path / "wavs").mkdir()
    entries = []
    for c in SHORT:
        rel = f"wavs/{c}.flac"
        (tmp_path / rel).write_bytes(clip(c).read_bytes())
        entries.append({"audio_filepath": rel, "duration": sf.info(str(clip(c))).duration,
                        "text": "some reference words", "speaker": "s1"})
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    out = tmp_path / "out.parquet"
    assert run(bundle, manifest, "-o", out).exit_code == 0
    rows = pq.read_table(out).to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(e["audio_filepath"] for e in entries)
    assert all(r["audio_filepath"] == r["id"] and r["speaker"] == "s1" for r in rows)
    res = runner.invoke(app, ["wer", str(manifest), str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["utterances"] == 2 and report["ref_words"] == 6
    # Joined: each hypothesis word met its reference (unjoined, all 6 would be deletions).
    assert report["hits"] + report["substitutions"] >= 1


# ----------------------------------------------------------------------------- -o targets


def refused_before_the_model(tmp_path: Path, out: Path, *inputs: object) -> str:
    """Run with a model that does not exist: a refusal of -o that names it proves the output
    was checked before any model was loaded. Returns the one-line message."""
    res = runner.invoke(app, ["transcribe", *map(str, inputs or (clip(SHORT[0]),)), "-o",
                              str(out), "--model", str(tmp_path / "no-such-model"),
                              "--no-progress"])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = res.output.strip().splitlines()
    message = " ".join(res.output.split())
    assert "no-such-model" not in message and "Traceback" not in res.output, res.output
    assert lines and lines[0].startswith("error:"), res.output
    return message


def test_a_fifo_or_a_device_at_o_is_refused_and_left_alone(tmp_path):
    import os
    import stat

    from tests.io.test_output_target import char_device

    fifo = tmp_path / "out.parquet"
    os.mkfifo(fifo)
    assert "is a FIFO" in refused_before_the_model(tmp_path, fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    device = char_device(tmp_path)
    before = os.stat(device)
    assert "is a character device" in refused_before_the_model(tmp_path, device)
    after = os.stat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


def test_files_we_did_not_write_are_refused_before_the_model_loads(tmp_path):
    manifest = tmp_path / "m.parquet"
    pq.write_table(__import__("pyarrow").table({"id": ["a"], "audio": [str(clip(SHORT[0]))]}),
                   manifest)
    before = manifest.read_bytes()
    assert "is one of the inputs" in refused_before_the_model(tmp_path, manifest, manifest)
    other = tmp_path / "other.parquet"
    other.write_bytes(before)
    assert "other.parquet exists and is not an oasr output" in refused_before_the_model(
        tmp_path, other, manifest)
    notes = tmp_path / "notes.txt"
    notes.write_text("my own notes\n")
    assert "notes.txt exists and is not an oasr output" in refused_before_the_model(
        tmp_path, notes)
    assert manifest.read_bytes() == before == other.read_bytes()
    assert notes.read_text() == "my own notes\n"


def test_overwrite_replaces_our_own_output_and_resume_adds_to_it(bundle, tmp_path):
    out = tmp_path / "o.txt"
    assert run(bundle, clip(SHORT[0]), "-o", out).exit_code == 0
    assert (tmp_path / "o.txt.oasr.json").is_file()
    res = run(bundle, clip(SHORT[1]), "-o", out)  # resume: adds the new row
    assert res.exit_code == 0, res.output
    assert sorted(line.split("\t")[0] for line in out.read_text().splitlines()) == sorted(SHORT)
    res = run(bundle, clip(SHORT[1]), "-o", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert [line.split("\t")[0] for line in out.read_text().splitlines()] == [SHORT[1]]
