"""The fault suite of record for ``oasr transcribe``: what a run must survive and say.

Corrupt rows, ``kill -9`` and SIGTERM at several points then a resume, two writers on one
output, unwritable outputs and bad flags (refused before the model loads), digital silence, and
memory that does not grow with the rows (checked structurally: what the run holds, not timings).
The model is a tiny random Whisper with the real tiny.en tokenizer (``conftest``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.engine.request import RequestOutput
from oasr.io import ManifestRow, OutputWriter
from oasr.transcribe.generation_limits import generation_cap
from oasr.transcribe.runner import TranscribeOptions, Transcriber, transcribe
from oasr.transcribe.signals import Terminated, terminate_as_interrupt
from tests.helpers.data import SHARED_DATA
from tests.transcribe.conftest import SAMPLE_RATE, clip, write_tiny_bundle, write_wav

REPO = Path(__file__).resolve().parents[2]
SHORT = ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004", "1688-142285-0005")
runner = CliRunner()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bundle(tmp_path_factory.mktemp("bundle") / "tiny", window_s=6.0)


@pytest.fixture(scope="module")
def clips() -> list[Path]:
    return [clip(c) for c in SHORT]


def cli(bundle: Path, *args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--model", str(bundle),
                               "--no-progress"])


def flat(text: str) -> str:
    return " ".join(text.split())


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def own_files(tmp_path: Path, clips: list[Path], n: int) -> tuple[Path, list[Path]]:
    """A manifest of ``n`` rows, each its own audio file (so a row done before a kill can be
    spoiled afterwards: a rerun that redid it would turn it into an error row)."""
    files = []
    (tmp_path / "audio").mkdir(exist_ok=True)
    for k in range(n):
        f = tmp_path / "audio" / f"r{k:03d}.flac"
        f.write_bytes(clips[k % len(clips)].read_bytes())
        files.append(f)
    return jsonl(tmp_path / "m.jsonl", [{"id": f.stem, "audio": str(f)} for f in files]), files


def spawn(bundle: Path, manifest: Path, out: Path, cwd: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "oasr.cli.app", "transcribe", str(manifest), "-o", str(out),
         "--model", str(bundle), "--no-progress", *extra],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(proc: subprocess.Popen, ready, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"exited before {what}: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)


def part_ids(out: Path) -> list[str]:
    parts = Path(f"{out}.parts")
    return [r["id"] for p in sorted(parts.glob("part-*.parquet"))
            for r in pq.read_table(p, columns=["id"]).to_pylist()]


def has_part(out: Path) -> bool:
    """A part is on disk (a listing only: reading the parts would race the final merge)."""
    return any(Path(f"{out}.parts").glob("part-*.parquet"))


def rows_of(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def resume_and_check(bundle: Path, manifest: Path, out: Path, files: list[Path],
                     spoil: list[str]) -> list[dict]:
    for row_id in spoil:
        (out.parent / "audio" / f"{row_id}.flac").write_bytes(b"spoiled")
    result = cli(bundle, manifest, "-o", out)
    assert result.exit_code == 0, result.output
    rows = rows_of(out)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(files)
    assert set(ids) == {f.stem for f in files}
    # Rows finished before the stop were kept, not redone from the spoiled files.
    assert all(r["error"] is None and r["text"] for r in rows), [
        r["error"] for r in rows if r["error"]][:3]
    assert not Path(f"{out}.parts").exists()
    assert not list(out.parent.glob(f"{out.name}.tmp-*"))
    assert not Path(f"{out}.lock").exists()
    return rows


# ----------------------------------------------------------------------------- corrupt rows


def test_corrupt_rows_are_error_rows_naming_the_row_and_the_problem(bundle, clips, tmp_path):
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio\n" * 50)
    truncated = tmp_path / "truncated.flac"
    data = clips[1].read_bytes()
    truncated.write_bytes(data[:len(data) * 2 // 3])
    zero = tmp_path / "zero.wav"
    zero.write_bytes(b"")
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    values = [
        {"bytes": clips[0].read_bytes(), "path": "a.flac"},
        {"bytes": b"", "path": "gone.flac"},  # empty bytes, and no file of that name
        {"bytes": junk.read_bytes(), "path": "junk.wav"},
        {"bytes": clips[1].read_bytes(), "path": "b.flac"},
    ]
    table = pa.table({"id": ["good-a", "empty-bytes", "junk-bytes", "good-b"],
                      "audio": pa.array(values, type=audio)})
    pq.write_table(table, tmp_path / "hf.parquet")
    files = jsonl(tmp_path / "files.jsonl", [
        {"id": "junk", "audio": str(junk)}, {"id": "truncated", "audio": str(truncated)},
        {"id": "zero-bytes", "audio": str(zero)}, {"id": "good-c", "audio": str(clips[2])}])
    out = tmp_path / "o.parquet"
    result = cli(bundle, tmp_path / "hf.parquet", files, "-o", out)
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in rows_of(out)}
    assert len(rows) == 8
    for good in ("good-a", "good-b", "good-c"):
        assert rows[good]["error"] is None and rows[good]["text"], rows[good]
    want = {"empty-bytes": "the audio is empty (0 bytes in the manifest)",
            "junk-bytes": "holds text, not audio", "junk": "holds text, not audio",
            "truncated": "truncated or corrupt", "zero-bytes": "is empty (0 bytes)"}
    for row_id, problem in want.items():
        message = rows[row_id]["error"]
        assert problem in message, message
        assert " row " in message or " line " in message, message  # names the manifest row
        assert "-0.00" not in message
    assert "does not exist" not in rows["empty-bytes"]["error"].split("(and")[0]


def test_crafted_headers_in_a_folder_are_error_rows_and_the_rest_transcribe(bundle, clips,
                                                                           tmp_path):
    from tests.helpers.audio_mutations import encode, wav_cases

    folder = tmp_path / "in"
    folder.mkdir()
    for k, c in enumerate(clips):
        (folder / f"good{k}.flac").write_bytes(c.read_bytes())
    lies = dict(wav_cases("wav", encode("WAV", "PCM_16")))
    (folder / "tag0.wav").write_bytes(lies["wav byte 20 = 0"])  # FFmpeg: no decoder
    (folder / "rate1.wav").write_bytes(lies["wav sample rate = 1"])
    (folder / "ch0.wav").write_bytes(lies["wav channels = 0"])
    out = tmp_path / "o.parquet"
    result = cli(bundle, folder, "-o", out)
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in rows_of(out)}
    assert len(rows) == len(clips) + 3
    assert all(rows[f"good{k}"]["text"] and not rows[f"good{k}"]["error"]
               for k in range(len(clips)))
    assert "no decoder for its audio codec" in rows["tag0"]["error"]
    assert "declares a sample rate of 1 Hz" in rows["rate1"]["error"]
    assert rows["ch0"]["error"] and rows["ch0"]["text"] is None
    for name in ("tag0", "rate1", "ch0"):  # the file is named once, not once per layer
        assert rows[name]["error"].count(str(folder / f"{name}.wav")) == 1, rows[name]["error"]


def test_mp3_resync_notes_do_not_reach_stderr(tmp_path):
    mp3 = SHARED_DATA / "misc" / "audio" / "common_voice_en_22058266.mp3"
    if not mp3.is_file():
        pytest.skip(f"needs {mp3}")
    data = mp3.read_bytes()
    bad = tmp_path / "resync.mp3"
    bad.write_bytes(data[:len(data) // 2] + bytes(range(256)) * 12 + data[len(data) // 2:])
    script = ("import sys\nfrom oasr.audio import iter_audio_chunks\n"
              "try:\n    n = sum(len(c) for c in iter_audio_chunks(sys.argv[1], 16000))\n"
              "except Exception as e:\n    print('error', e)\nelse:\n    print('samples', n)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(bad)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(("samples", "error"))
    assert "Illegal Audio-MPEG-Header" not in proc.stderr
    assert "resync" not in proc.stderr.lower()


# ----------------------------------------------------------------------------- kills


def test_kill_9_before_any_part_then_resume(bundle, clips, tmp_path):
    manifest, files = own_files(tmp_path, clips, 24)
    out = tmp_path / "out.parquet"
    proc = spawn(bundle, manifest, out, tmp_path)
    try:
        wait_for(proc, Path(f"{out}.lock").exists, "lock file")  # running, nothing written
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert Path(f"{out}.lock").exists() and not out.exists()  # the lock file stays, unheld
    resume_and_check(bundle, manifest, out, files, spoil=part_ids(out))


def test_kill_9_after_a_part_then_resume(bundle, clips, tmp_path):
    manifest, files = own_files(tmp_path, clips, 160)
    out = tmp_path / "out.parquet"
    # Batches of 4: rows reach the writer a few at a time, so the run outlives its first
    # part by more than the poll (one batch of everything can land every part at once).
    proc = spawn(bundle, manifest, out, tmp_path, "-b", "4")
    try:
        wait_for(proc, lambda: has_part(out), "part file")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    done = part_ids(out)
    assert not out.exists() and 0 < len(done) < len(files)
    resume_and_check(bundle, manifest, out, files, spoil=done)


def test_a_kill_during_the_final_merge_leaves_a_temp_file_the_rerun_removes(bundle, clips,
                                                                            tmp_path):
    manifest, files = own_files(tmp_path, clips, 6)
    out = tmp_path / "out.parquet"
    assert cli(bundle, manifest, "-o", out).exit_code == 0
    first = rows_of(out)
    # What a kill -9 inside close() leaves: the merge's temp file under the dead pid.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = out.with_name(f"{out.name}.tmp-{dead.pid}")
    stale.write_bytes(b"")
    stale_part = Path(f"{out}.parts") / f".part-000001.parquet.tmp-{dead.pid}"
    stale_part.parent.mkdir()
    stale_part.write_bytes(b"half a part")
    rows = resume_and_check(bundle, manifest, out, files, spoil=[f.stem for f in files])
    assert rows == first
    assert not stale.exists() and not stale_part.exists()


@pytest.mark.parametrize("when", ["while loading", "after a part"])
def test_sigterm_keeps_finished_rows_then_resume(bundle, clips, tmp_path, when):
    manifest, files = own_files(tmp_path, clips, 160)
    out = tmp_path / "out.parquet"
    proc = spawn(bundle, manifest, out, tmp_path, "-b", "4")  # as in the kill -9 test
    try:
        if when == "after a part":
            wait_for(proc, lambda: has_part(out), "part file")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    if when == "after a part":
        assert proc.returncode == 143, err.decode()[-2000:]
        assert "terminated: finished rows are kept" in err.decode()
        assert "Traceback" not in err.decode()
    assert not out.exists()
    resume_and_check(bundle, manifest, out, files, spoil=part_ids(out))


def test_sigterm_flushes_every_finished_row(tiny_engine, clips, tmp_path):
    """In process, so the count is exact: SIGTERM after row k leaves exactly k rows on disk,
    none of them waiting in the writer's buffer (64 rows)."""
    manifest = jsonl(tmp_path / "m.jsonl",
                     [{"id": f"u{k}", "audio": str(clips[k % 4])} for k in range(20)])
    out = tmp_path / "o.parquet"
    writer = OutputWriter(out, flush_rows=64, flush_seconds=3600)

    def stop_at_seven(row, stats):
        if stats.rows == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), terminate_as_interrupt():
        transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]), writer,
                   on_row=stop_at_seven)
    assert len(part_ids(out)) == 7
    assert signal.getsignal(signal.SIGTERM) is before  # the handler found is put back


def test_rows_are_flushed_by_time_not_only_by_count(tmp_path, monkeypatch):
    import oasr.io.writer as writer_module

    now = [100.0]
    monkeypatch.setattr(writer_module.time, "monotonic", lambda: now[0])
    writer = OutputWriter(tmp_path / "o.parquet", flush_rows=64, flush_seconds=3.0)
    writer.write(writer_module.OutputRow(id="a", text="x"))
    now[0] += 1.0
    writer.write(writer_module.OutputRow(id="b", text="y"))
    assert part_ids(tmp_path / "o.parquet") == []
    now[0] += 2.5  # the oldest buffered row has waited 3.5 s
    writer.write(writer_module.OutputRow(id="c", text="z"))
    assert part_ids(tmp_path / "o.parquet") == ["a", "b", "c"]
    # No row arrives while a long recording decodes: the engine's outputs flush by time.
    writer.write(writer_module.OutputRow(id="d", text="w"))
    writer.flush_if_due()
    assert part_ids(tmp_path / "o.parquet") == ["a", "b", "c"]
    now[0] += 3.0
    writer.flush_if_due()
    assert part_ids(tmp_path / "o.parquet") == ["a", "b", "c", "d"]


def test_the_writer_is_offered_a_timed_flush_at_every_window(tiny_engine, clips, tmp_path):
    long = tmp_path / "long.wav"
    import soundfile as sf

    audio, _ = sf.read(str(clips[1]), dtype="float32")
    write_wav(long, np.tile(audio, 5))  # 25 s: three 10 s windows
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "short", "audio": str(clips[0])},
                                            {"id": "long", "audio": str(long)}])
    calls = []

    class Writer(OutputWriter):
        def flush_if_due(self) -> None:
            calls.append(len(self._buffer))
            super().flush_if_due()

    stats = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                       Writer(tmp_path / "o.parquet"))
    assert stats.rows == 2
    assert len(calls) >= 4  # one per window: the short row's and the long row's three


# ----------------------------------------------------------------------------- two writers


def test_a_second_writer_on_one_output_refuses_naming_the_holder(bundle, clips, tmp_path):
    manifest, files = own_files(tmp_path, clips, 40)
    out = tmp_path / "race.parquet"
    first = spawn(bundle, manifest, out, tmp_path, "--shard", "0/2")
    try:
        lock = Path(f"{out}.lock")
        wait_for(first, lambda: lock.exists() and lock.read_text().strip(), "locked")
        second = cli(bundle, manifest, "-o", out, "--shard", "1/2")
        assert second.exit_code == 2
        assert f"being written by another oasr process (pid {first.pid})" in flat(
            second.output)
        _, err = first.communicate(timeout=180)
        assert first.returncode == 0, err.decode()[-2000:]
    finally:
        first.kill()
        first.wait()
    shard0 = {r["id"] for r in rows_of(out)}
    # The refused run wrote nothing: the output is the first shard's, whole.
    again = cli(bundle, manifest, "-o", out, "--shard", "0/2")
    assert again.exit_code == 0 and {r["id"] for r in rows_of(out)} == shard0
    # Shards into one folder each get their own file.
    for i in range(2):
        assert cli(bundle, manifest, "-o", f"{tmp_path}/shards/", "--shard", f"{i}/2"
                   ).exit_code == 0
    got = [r["id"] for p in sorted((tmp_path / "shards").glob("*.parquet")) for r in rows_of(p)]
    assert sorted(got) == sorted(f.stem for f in files)


# ----------------------------------------------------------------------------- disk full


def test_a_full_disk_is_one_line_naming_the_file_and_what_is_kept_then_resumes(
        bundle, clips, tmp_path, monkeypatch):
    import errno

    import oasr.io
    from oasr.io import writer as writer_module

    manifest, files = own_files(tmp_path, clips, 10)
    out = tmp_path / "o.parquet"
    real_open, real_write = oasr.io.open_writer, writer_module.pq.write_table
    calls = []

    def small_parts(*args, **kwargs):
        w = real_open(*args, **kwargs)
        w.flush_rows = 3  # several parts in a 10-row run
        return w

    def full_after_one_part(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(*args, **kwargs)

    with monkeypatch.context() as patch:  # not undo(): that also undoes conftest's setenv
        patch.setattr(oasr.io, "open_writer", small_parts)
        patch.setattr(writer_module.pq, "write_table", full_after_one_part)
        result = cli(bundle, manifest, "-o", out, "--quiet", "--no-language-check")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "Errno" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    parts = Path(f"{out}.parts")
    assert lines[0] == (
        f"error: cannot write {parts}/part-000002.parquet: No space left on device; kept: 3 "
        f"finished rows in 1 part file in {parts}; the 3 rows finished since were not "
        "written and are redone by a rerun; fix the cause (free space) and rerun the same "
        "command to resume")
    kept = part_ids(out)
    assert len(kept) == 3 and not out.exists()
    # The rerun resumes: the kept rows are not decoded again (their audio is spoiled now).
    resume_and_check(bundle, manifest, out, files, spoil=kept)


# ----------------------------------------------------------------------------- refused up front


@pytest.fixture
def no_engine(monkeypatch):
    """Building an engine fails the test: these refusals must come before the model loads."""
    import oasr.engine.engine as engine_module

    def refuse(*args, **kwargs):
        raise AssertionError("the engine was built")

    monkeypatch.setattr(engine_module.ASREngine, "__init__", refuse)


@pytest.mark.parametrize("out, reason", [
    ("/proc/out.parquet", "cannot write the output /proc/out.parquet: cannot create files in "
                          "/proc"),
    ("/proc/x/out.parquet", "cannot write the output /proc/x/out.parquet: cannot create the "
                            "folder /proc/x in /proc"),
    ("/etc/passwd/o.parquet", "cannot write the output /etc/passwd/o.parquet: /etc/passwd is a "
                              "file, not a folder"),
])
def test_an_unwritable_output_is_refused_before_the_model_loads(bundle, clips, tmp_path,
                                                                no_engine, out, reason):
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "a", "audio": str(clips[0])}])
    result = cli(bundle, manifest, "-o", out)
    assert result.exit_code == 2, result.output
    assert reason in flat(result.output)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("flags, says", [
    (["--device", "tpu"], "--device tpu: not a device this build runs on; use auto, cpu, cuda"),
    (["--device", "gpu"], "(NVIDIA GPUs are 'cuda')"),
    (["--batch-size", "0"], "--batch-size 0: must be at least 1"),
    (["--limit", "0"], "--limit 0: must be at least 1"),
    (["--dtype", "fp8"], "--dtype fp8: use one of auto, fp32"),
    (["--shard", "x"], "--shard x: expected i/n, e.g. 0/4"),
    (["--shard", "2/2"], "--shard 2/2: need 0 <= i < n"),
])
def test_bad_flag_values_are_one_line_with_the_fix(bundle, clips, tmp_path, no_engine, flags,
                                                   says):
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "a", "audio": str(clips[0])}])
    result = cli(bundle, manifest, "-o", tmp_path / "o.parquet", *flags)
    assert result.exit_code == 2, result.output
    assert says in flat(result.output)
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "max_batch_size" not in result.output


def test_cuda_without_cuda_suggests_the_fix(bundle, clips, tmp_path, no_engine):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "a", "audio": str(clips[0])}])
    result = cli(bundle, manifest, "-o", tmp_path / "o.parquet", "--device", "cuda")
    assert result.exit_code == 2
    assert "use --device cpu, or on a machine with an NVIDIA GPU install a CUDA build of torch" \
        in flat(result.output)


def test_a_manifest_without_rows_says_so(bundle, tmp_path, no_engine):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = cli(bundle, empty, "-o", tmp_path / "o.parquet")
    assert result.exit_code == 1
    assert "the inputs hold no rows" in flat(result.output)
    assert not (tmp_path / "o.parquet").exists()


def test_a_bad_manifest_fails_in_seconds_having_written_nothing(bundle, clips, tmp_path,
                                                               no_engine):
    rows = [{"id": f"u{k}", "audio": str(clips[k % len(clips)])} for k in range(500)]
    rows[400]["id"] = "u3"
    out = tmp_path / "o.parquet"
    for bad, says in ((rows, "duplicate id 'u3':"),
                      (rows[:10] + [{"id": "x\udc80", "audio": str(clips[0])}],
                       "line 11: the id 'x\\x80' is not valid Unicode text")):
        manifest = jsonl(tmp_path / "m.jsonl", bad)
        start = time.monotonic()
        result = cli(bundle, manifest, "-o", out)
        assert result.exit_code == 2, result.output
        assert says in flat(result.output) and "Traceback" not in result.output
        assert time.monotonic() - start < 10
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]  # nothing written


def test_a_file_name_that_is_not_utf8_transcribes_under_a_writable_id(bundle, clips, tmp_path):
    folder = os.fsencode(tmp_path / "in")
    os.mkdir(folder)
    with open(folder + b"/caf\xe9.flac", "wb") as f:
        f.write(clips[0].read_bytes())
    out = tmp_path / "o.parquet"
    result = cli(bundle, os.fsdecode(folder), "-o", out)
    assert result.exit_code == 0, result.output
    (row,) = rows_of(out)
    assert row["id"] == "caf\\xe9" and row["error"] is None and row["text"]


# ----------------------------------------------------------------------------- silence


def test_digital_silence_is_an_empty_transcript_with_a_reason(bundle, clips, tmp_path):
    silent = write_wav(tmp_path / "silent.wav", np.zeros(2 * SAMPLE_RATE, np.float32))
    long_silent = write_wav(tmp_path / "long-silent.wav", np.zeros(14 * SAMPLE_RATE, np.float32))
    manifest = jsonl(tmp_path / "m.jsonl", [
        {"id": "silent", "audio": str(silent)}, {"id": "long-silent", "audio": str(long_silent)},
        {"id": "speech", "audio": str(clips[0])}])
    out = tmp_path / "o.parquet"
    result = cli(bundle, manifest, "-o", out)
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in rows_of(out)}
    for row_id, seconds in (("silent", 2.0), ("long-silent", 14.0)):
        row = rows[row_id]
        assert row["error"] is None and row["text"] == "", row
        assert row["finish_reason"] == "no_speech"
        assert row["duration"] == pytest.approx(seconds)
    assert rows["speech"]["text"] and rows["speech"]["finish_reason"] == "stop"
    assert "2 rows hold no speech: digital silence" in flat(result.output)
    assert "0" in flat(result.output)  # no error rows counted


# ----------------------------------------------------------------------------- memory


def test_rows_are_streamed_not_accumulated(tiny_engine, clips, tmp_path):
    """Rows are pulled from the manifest only as fast as they finish: at any time at most
    ``max_active`` rows are open and at most ``max_active`` finished rows wait to be written,
    whatever the run's length (and at most ``max_active`` more are decoding ahead); the run's
    figures are counters, not per-row lists."""
    pulled = [0]

    def rows(n: int) -> Iterator[ManifestRow]:
        for k in range(n):
            pulled[0] += 1
            if k % 3 == 2:  # error rows finish without the engine: the other bound
                yield ManifestRow(id=f"bad{k}", audio=None, error="no audio", source=f"r{k}")
            else:
                yield ManifestRow(id=f"r{k}", audio=str(clips[k % 4]), source=f"r{k}")

    transcriber = Transcriber(tiny_engine, TranscribeOptions(inputs=[]), max_active=4)
    finished = 0
    most_open = 0
    for _out, _ref in transcriber.run(rows(60)):
        finished += 1
        most_open = max(most_open, pulled[0] - finished)
        assert len(transcriber.active) <= 4 and len(transcriber.ready) <= 4 + 1
    assert finished == 60
    # Plus the rows decoded ahead (oasr.transcribe.prefetch), bounded by max_active too.
    assert transcriber.prefetch_depth <= 4
    assert 1 <= most_open <= 2 * 4 + 1 + transcriber.prefetch_depth

    manifest = jsonl(tmp_path / "m.jsonl",
                     [{"id": f"u{k}", "audio": str(clips[k % 4]), "text": "a b"}
                      for k in range(30)])
    stats = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                       OutputWriter(tmp_path / "o.parquet"))
    assert stats.rows == 30 and stats.wer.rows == 30 and stats.wer.ref_words == 60
    # Examples and counts by reason (and, by kernel, the dispatch counts): nothing by row.
    per_row = [v for k, v in vars(stats).items()
               if isinstance(v, (list, dict, set)) and k != "dispatch"]
    assert all(len(v) <= 5 for v in per_row), per_row


def test_rows_leave_in_input_order_whatever_order_they_finish(tiny_engine, clips, tmp_path):
    """Error rows finish at once and recordings finish in batches, so completion order is
    shuffled; the rows still reach the output (JSONL included) in input order."""
    finished: list[str] = []

    class Recording(Transcriber):
        def _drain(self):
            finished.extend(out.id for out, _ref in self.ready)
            yield from super()._drain()

    rows = [ManifestRow(id=f"bad{k}", audio=None, error="no audio", source=f"r{k}")
            if k % 3 == 2 else ManifestRow(id=f"r{k}", audio=str(clips[k % 4]), source=f"r{k}")
            for k in range(24)]
    transcriber = Recording(tiny_engine, TranscribeOptions(inputs=[]), max_active=4)
    written = [out.id for out, _ref in transcriber.run(iter(rows))]
    wanted = [r.id for r in rows]
    assert finished != wanted and sorted(finished) == sorted(wanted)  # shuffled completion
    assert written == wanted
    assert not transcriber._held and not transcriber._started

    manifest = jsonl(tmp_path / "m.jsonl",
                     [{"id": f"u{k}", "audio": str(clips[k % 4]) if k % 3 else "missing.wav"}
                      for k in range(12)])
    out = tmp_path / "o.jsonl"
    transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
               OutputWriter(out, "jsonl"))
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == [f"u{k}" for k in range(12)]


def test_repetition_is_reported_and_counted(tiny_engine, clips, tmp_path, monkeypatch):
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "loop", "audio": str(clips[0])},
                                            {"id": "fine", "audio": str(clips[1])}])
    step = tiny_engine.step
    caps = []
    add = tiny_engine.add_request

    def recording_add(request):
        caps.append(request.decoding.max_new_tokens)
        add(request)

    def looping_step() -> list[RequestOutput]:
        outs = step()
        for o in outs:
            if o.metadata.get("row") == "loop":
                o.token_ids = [11, 12, 13] * 6
                o.finish_reason = "length"
        return outs

    monkeypatch.setattr(tiny_engine, "step", looping_step)
    monkeypatch.setattr(tiny_engine, "add_request", recording_add)
    stats = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                       OutputWriter(tmp_path / "o.parquet"))
    rows = {r["id"]: r for r in rows_of(tmp_path / "o.parquet")}
    assert rows["loop"]["finish_reason"] == "repetition"
    assert rows["fine"]["finish_reason"] == "stop"
    assert stats.finish_reasons == {"repetition": 1, "stop": 1}
    # One window a clip (2.8 s, 5.1 s): each window's cap follows its length.
    assert sorted(caps) == [generation_cap(2.835), generation_cap(5.06)] == [35, 61]


@pytest.mark.gpu
def test_a_cuda_index_past_the_devices_is_refused(bundle, clips, tmp_path, no_engine):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    manifest = jsonl(tmp_path / "m.jsonl", [{"id": "a", "audio": str(clips[0])}])
    n = torch.cuda.device_count()
    result = cli(bundle, manifest, "-o", tmp_path / "o.parquet", "--device", f"cuda:{n}")
    assert result.exit_code == 2
    assert f"this machine has {n} CUDA device(s)" in flat(result.output)
