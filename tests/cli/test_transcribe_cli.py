"""``oasr transcribe`` end to end with a tiny random Whisper bundle (real tiny.en tokenizer)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.transcribe.conftest import clip

REPO = Path(__file__).resolve().parents[2]
SHORT = ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004", "1688-142285-0005")

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")



@pytest.fixture(scope="module")
def clips() -> list[Path]:
    return [clip(c) for c in SHORT]


def transcribe(bundle: Path, *args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--model", str(bundle),
                               "--no-progress"])


def flat(text: str) -> str:
    """Rich wraps long lines at 80 columns off a terminal; compare without the wrapping."""
    return " ".join(text.split())


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def rows_of(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _manifest(tmp_path: Path, clips: list[Path], n: int, name: str = "m.jsonl") -> Path:
    return jsonl(tmp_path / name,
                 [{"id": f"utt-{k:03d}", "audio": str(clips[k % len(clips)])} for k in range(n)])


# ----------------------------------------------------------------------------- errors


def test_error_rows_keep_exit_0_unless_fail_on_error(bundle, clips, tmp_path):
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio\n" * 50)
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "good", "audio": str(clips[0])},
                                            {"id": "junk", "audio": str(junk)}])
    result = transcribe(bundle, manifest, "-o", tmp_path / "a.parquet")
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in rows_of(tmp_path / "a.parquet")}
    assert rows["good"]["error"] is None and rows["good"]["text"]
    assert "holds text, not audio" in rows["junk"]["error"]
    assert "junk" in flat(result.output)  # the summary lists the error row

    result = transcribe(bundle, manifest, "-o", tmp_path / "b.parquet", "--fail-on-error")
    assert result.exit_code == 1, result.output
    # The output is written all the same.
    assert {r["id"] for r in rows_of(tmp_path / "b.parquet")} == {"good", "junk"}


def test_bad_invocations_exit_2_saying_why(bundle, clips, tmp_path):
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "a", "audio": str(clips[0]), "spk": 1}])
    out = tmp_path / "o.parquet"

    result = transcribe(bundle, manifest, "-o", out, "--audio-column", "nope")
    assert result.exit_code == 2
    assert "nope" in flat(result.output) and "available columns: id, audio, spk" in flat(
        result.output)

    # Beam search keeps no encoder row to align against: asked for, timings are refused.
    result = transcribe(bundle, manifest, "-o", out, "--word-timestamps",
                        "--decode-option", "beam_size=2")
    assert result.exit_code == 2
    assert "cannot time words in this configuration (modes it can: none)" in flat(result.output)

    result = runner.invoke(app, ["transcribe", str(manifest), "-o", str(out), "--model",
                                 "/nonexistent", "--no-progress"])
    assert result.exit_code == 2
    assert "'/nonexistent' is not a folder, not an installed model package and not a Hub id" \
        in flat(result.output)

    empty = tmp_path / "empty-model"
    empty.mkdir()
    result = runner.invoke(app, ["transcribe", str(manifest), "-o", str(out), "--model",
                                 str(empty), "--no-progress"])
    assert result.exit_code == 2
    assert "Looked for:" in flat(result.output)  # what each format's detector wants
    assert "config.json" in flat(result.output)

    result = transcribe(bundle, manifest, "-o", tmp_path / "o.csv", "--format", "csv")
    assert result.exit_code == 2
    assert "unknown output format 'csv'" in flat(result.output)

    result = transcribe(bundle, manifest, "-o", out, "--shard", "2/2")
    assert result.exit_code == 2
    assert not out.exists()


# ----------------------------------------------------------------------------- resume


def test_a_killed_run_resumes_with_every_id_exactly_once(bundle, clips, tmp_path):
    # Each row its own file, so the rows finished before the kill can be spoiled afterwards:
    # a rerun that redid them would turn them into error rows.
    n = 160  # the writer flushes a part every 64 rows: the kill lands with ~96 rows to go
    files = []
    for k in range(n):
        f = tmp_path / "audio" / f"r{k:03d}.flac"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(clips[k % len(clips)].read_bytes())
        files.append(f)
    manifest = jsonl(tmp_path / "m.jsonl",
                     [{"id": f.stem, "audio": str(f)} for f in files])
    out = tmp_path / "out.parquet"
    parts = Path(f"{out}.parts")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "oasr.cli.app", "transcribe", str(manifest), "-o", str(out),
         "--model", str(bundle), "--no-progress"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (parts.is_dir() and any(parts.glob("part-*.parquet"))):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no part file appeared"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert not out.exists(), "the run finished before it could be killed"
    done = [r["id"] for p in sorted(parts.glob("part-*.parquet")) for r in rows_of(p)]
    assert 0 < len(done) < n
    for row_id in done:
        (tmp_path / "audio" / f"{row_id}.flac").write_bytes(b"spoiled")

    result = transcribe(bundle, manifest, "-o", out)
    assert result.exit_code == 0, result.output
    rows = rows_of(out)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == n
    assert set(ids) == {f.stem for f in files}
    # The rows done before the kill were kept, not redone from the spoiled files.
    assert all(r["error"] is None and r["text"] for r in rows), [
        r["error"] for r in rows if r["error"]][:3]
    assert not parts.exists()


def test_retry_errors_reruns_only_rows_that_failed(bundle, clips, tmp_path):
    late = tmp_path / "late.flac"
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "ok", "audio": str(clips[0])},
                                            {"id": "late", "audio": str(late)}])
    out = tmp_path / "o.parquet"
    assert transcribe(bundle, manifest, "-o", out).exit_code == 0
    first = {r["id"]: r for r in rows_of(out)}
    assert "does not exist" in first["late"]["error"]

    late.write_bytes(clips[1].read_bytes())
    assert transcribe(bundle, manifest, "-o", out).exit_code == 0
    assert {r["id"]: r["error"] for r in rows_of(out)} == {
        "ok": None, "late": first["late"]["error"]}  # done is done, errors included

    assert transcribe(bundle, manifest, "-o", out, "--retry-errors").exit_code == 0
    rows = rows_of(out)
    assert sorted(r["id"] for r in rows) == ["late", "ok"]
    by_id = {r["id"]: r for r in rows}
    assert by_id["late"]["error"] is None and by_id["late"]["text"]
    assert by_id["ok"] == first["ok"]


# ----------------------------------------------------------------------------- outputs


def test_jsonl_and_txt_outputs_carry_the_same_rows(bundle, clips, tmp_path):
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "a", "audio": str(clips[0])},
                                            {"id": "b", "audio": str(tmp_path / "gone.wav")}])
    assert transcribe(bundle, manifest, "-o", tmp_path / "o.parquet").exit_code == 0
    want = {r["id"]: r for r in rows_of(tmp_path / "o.parquet")}

    assert transcribe(bundle, manifest, "-o", tmp_path / "o.jsonl", "-f", "jsonl").exit_code == 0
    lines = (tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()
    got = {r["id"]: r for r in map(json.loads, lines)}
    assert set(got) == {"a", "b"}
    assert got["a"]["text"] == want["a"]["text"] and got["a"]["error"] is None
    assert got["b"]["error"] == want["b"]["error"] and got["b"]["text"] is None

    assert transcribe(bundle, manifest, "-o", tmp_path / "o.txt", "--format", "txt"
                      ).exit_code == 0
    lines = (tmp_path / "o.txt").read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == sorted([f"a\t{want['a']['text']}", f"b\tERROR: {want['b']['error']}"])


def test_shards_cover_every_id_once_and_limit_takes_the_first_rows(bundle, clips, tmp_path):
    manifest = _manifest(tmp_path, clips, 12)
    everything = {f"utt-{k:03d}" for k in range(12)}
    shards = []
    for i in range(2):
        out = tmp_path / f"s{i}.parquet"
        result = transcribe(bundle, manifest, "-o", out, "--shard", f"{i}/2")
        assert result.exit_code == 0, result.output
        shards.append({r["id"] for r in rows_of(out)})
    assert shards[0] and shards[1]
    assert not shards[0] & shards[1]
    assert shards[0] | shards[1] == everything

    out = tmp_path / "limited.parquet"
    assert transcribe(bundle, manifest, "-o", out, "--limit", "3").exit_code == 0
    assert [r["id"] for r in rows_of(out)] == ["utt-000", "utt-001", "utt-002"]


# ----------------------------------------------------------------------------- inputs


def test_hf_parquet_with_embedded_bytes_keeps_passthrough_columns(bundle, clips, tmp_path):
    audio_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({
        "id": ["x", "y"],
        "audio": pa.array([{"bytes": clips[0].read_bytes(), "path": "not/on/disk.flac"},
                           {"bytes": clips[1].read_bytes(), "path": "neither.flac"}],
                          type=audio_type),
        "text": ["a reference", "another reference"],
        "speaker_id": pa.array([1688, 1998], type=pa.int32()),
        "split": ["test", "test"],
    })
    manifest = tmp_path / "hf.parquet"
    pq.write_table(table, manifest)
    out = tmp_path / "o.parquet"
    result = transcribe(bundle, manifest, "-o", out)
    assert result.exit_code == 0, result.output
    got = pq.read_table(out)
    assert got.schema.field("speaker_id").type == pa.int32()
    rows = {r["id"]: r for r in got.to_pylist()}
    assert {k: (r["speaker_id"], r["split"], r["error"]) for k, r in rows.items()} == {
        "x": (1688, "test", None), "y": (1998, "test", None)}
    assert all(r["text"] for r in rows.values())
    assert "WER" in flat(result.output)  # a text column turns on scoring


def test_nemo_jsonl_manifest(bundle, clips, tmp_path):
    import soundfile as sf

    (tmp_path / "wavs").mkdir()
    entries = []
    for k, c in enumerate(clips[:2]):
        rel = f"wavs/{c.name}"
        (tmp_path / rel).write_bytes(c.read_bytes())
        entries.append({"audio_filepath": rel, "duration": round(sf.info(str(c)).duration, 3),
                        "text": "ref", "lang": "en", "utt_no": k})
    manifest = jsonl(tmp_path / "nemo.jsonl", entries)
    out = tmp_path / "o.parquet"
    result = transcribe(bundle, manifest, "-o", out)
    assert result.exit_code == 0, result.output
    rows = rows_of(out)
    assert [r["id"] for r in rows] == [e["audio_filepath"] for e in entries]
    for r, e in zip(rows, entries, strict=True):
        assert r["audio_filepath"] == e["audio_filepath"]
        assert r["error"] is None and r["text"]
        assert r["duration"] == pytest.approx(e["duration"], abs=1e-3)
        assert (r["lang"], r["utt_no"]) == (e["lang"], e["utt_no"])


def test_metadata_records_resolved_options_and_a_resume_with_others_warns(bundle, clips,
                                                                          tmp_path):
    manifest = _manifest(tmp_path, clips, 3)
    out = tmp_path / "o.parquet"
    assert transcribe(bundle, manifest, "-o", out, "--limit", "2").exit_code == 0
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(out).metadata.items()
            if not k.startswith(b"ARROW:")}
    resolved = json.loads(meta["decode_options"])
    assert resolved["beam_size"] == 1 and resolved["repetition_guard"] == 0  # defaults filled
    assert meta["decode_method"] == "aed" and meta["window_s"] == "6"
    assert meta["word_timestamps"] in ("true", "false")

    same = transcribe(bundle, manifest, "-o", out, "--limit", "2")
    assert same.exit_code == 0 and "other settings" not in flat(same.output)
    result = transcribe(bundle, manifest, "-o", out, "-d", "repetition_guard=3")
    assert result.exit_code == 0, result.output
    said = flat(result.output)
    assert "was started with other settings (decode_options" in said
    assert '"repetition_guard": 0' in said and '"repetition_guard": 3' in said
    assert len(rows_of(out)) == 3
