"""``--gpus`` with CPU workers standing in for devices (OASR_GPUS_FAKE=cpu, test-only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from oasr.transcribe.multi_gpu import _worker_argv, parse_gpus, shard_output
from tests.transcribe.conftest import clip, write_tiny_bundle

REPO = Path(__file__).resolve().parents[2]
SHORT = ("1688-142285-0002", "1688-142285-0003")


def test_parse_gpus_and_worker_arguments(monkeypatch):
    monkeypatch.delenv("OASR_GPUS_FAKE", raising=False)
    assert parse_gpus("2") == ["0", "1"]
    assert parse_gpus("1,3") == ["1", "3"]
    assert parse_gpus("all", visible=3) == ["0", "1", "2"]
    for bad in ("0", "x", "1,1"):
        with pytest.raises(ValueError):
            parse_gpus(bad)
    with pytest.raises(ValueError, match="no CUDA device"):
        parse_gpus("all", visible=0)
    assert shard_output("o/t.parquet", 1, 2) == "o/t.shard-1-of-2.parquet"
    argv = ["m.jsonl", "-o", "t.parquet", "--gpus", "2", "--device", "cuda:1", "-b", "4"]
    assert _worker_argv(argv, "t.parquet", 1, 2, fake=False) == [
        "m.jsonl", "-o", "t.shard-1-of-2.parquet", "-b", "4", "--shard", "1/2", "--device",
        "cuda"]


def _run(args: list[str], cwd: Path, fake: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if fake:
        env["OASR_GPUS_FAKE"] = "cpu"
    return subprocess.run([sys.executable, "-m", "oasr.cli.app", "transcribe", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_gpus_rows_equal_one_process_and_a_failed_shard_resumes(tmp_path):
    bundle = write_tiny_bundle(tmp_path / "tiny", window_s=6.0)
    clips = [clip(c) for c in SHORT]
    rows = [{"id": f"utt-{k:02d}", "audio": str(clips[k % 2])} for k in range(6)]
    rows.append({"id": "broken", "audio": str(tmp_path / "missing.flac")})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    common = [str(manifest), "--model", str(bundle), "--no-progress", "--threads", "1"]

    single = _run([*common, "-o", str(tmp_path / "one.parquet")], tmp_path, fake=False)
    assert single.returncode == 0, single.stderr[-2000:]
    expect = sorted(pq.read_table(tmp_path / "one.parquet").to_pylist(), key=lambda r: r["id"])

    out = tmp_path / "multi.parquet"
    # An unreadable part in shard 1's output: its worker fails (exit 1), shard 0 finishes.
    blocked = tmp_path / "multi.shard-1-of-2.parquet.parts" / "part-000001.parquet"
    blocked.parent.mkdir()
    blocked.write_bytes(b"not parquet")
    first = _run([*common, "-o", str(out), "--gpus", "2"], tmp_path)
    assert first.returncode == 1, first.stderr[-2000:]
    assert "shard 1/2 on cpu: FAILED (exit 1)" in " ".join(first.stderr.split())
    parts = json.loads(Path(f"{out}.shards.json").read_text())
    assert [p["complete"] for p in parts["parts"]] == [True, False]

    blocked.unlink()
    again = _run([*common, "-o", str(out), "--gpus", "2"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    # One summary for the run (the workers are quiet): the rows both shards ran now, the
    # rows shard 0 had finished before skipped.
    assert again.stderr.count("oasr transcribe") == 1, again.stderr[-3000:]
    done_before = len(pq.read_table(parts["parts"][0]["output"]))
    summary = next(line for line in again.stderr.splitlines() if line.startswith("│"))
    cells = [c.strip() for c in summary.strip("│").split("│")]
    assert cells[:2] == [str(len(rows) - done_before), str(done_before)], summary
    parts = json.loads(Path(f"{out}.shards.json").read_text())
    assert all(p["complete"] for p in parts["parts"])
    got = [r for p in parts["parts"] for r in pq.read_table(p["output"]).to_pylist()]
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)) == len(rows)
    # timings differ run to run; the confidence by float rounding (rows batch differently)
    drop = {"latency_ms", "duration_s", "rtf", "confidence"}
    got = sorted(got, key=lambda r: r["id"])
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == [
        {k: v for k, v in r.items() if k not in drop} for r in expect]
    conf = [(r["confidence"], e["confidence"]) for r, e in zip(got, expect, strict=True)]
    assert all((a is None) == (b is None) for a, b in conf)
    assert [a for a, _ in conf if a is not None] == pytest.approx(
        [b for _, b in conf if b is not None], rel=1e-5, abs=1e-7)
    assert any(r["id"] == "broken" and r["error"] for r in got)


def _children(pid: int) -> dict[int, str]:
    """Child processes of ``pid`` (Linux /proc): pid -> command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out[int(entry.name)] = cmd
    return out


def test_a_sigkilled_worker_is_reported_and_its_shard_resumes(tmp_path):
    import signal
    import time

    bundle = write_tiny_bundle(tmp_path / "tiny", window_s=6.0)
    clips = [clip(c) for c in SHORT]
    # Each row its own file, so shard 1's rows finished before the kill can be spoiled: a
    # rerun that redid them would turn them into error rows.
    files = []
    for k in range(240):  # ~120 a shard; its writer flushes a part every 64 rows (or 3 s)
        f = tmp_path / "audio" / f"r{k:03d}.flac"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(clips[k % 2].read_bytes())
        files.append(f)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": f.stem, "audio": str(f)}) + "\n"
                                for f in files), encoding="utf-8")
    out = tmp_path / "multi.parquet"
    # Small batches, so shard 1's rows reach its writer a few at a time: with one batch of
    # all its rows the first part and the merged file land within milliseconds and the kill
    # below can miss the window.
    args = [str(manifest), "--model", str(bundle), "--threads", "1", "-o", str(out),
            "--gpus", "2", "-b", "4"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "OASR_GPUS_FAKE": "cpu"}
    parts = tmp_path / "multi.shard-1-of-2.parquet.parts"
    log = tmp_path / "parent.stderr"
    with log.open("w") as stderr:
        parent = subprocess.Popen([sys.executable, "-m", "oasr.cli.app", "transcribe", *args],
                                  cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                  stderr=stderr, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (parts.is_dir() and any(parts.glob("part-*.parquet"))):
            assert parent.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "shard 1 wrote no part"
            time.sleep(0.01)
        worker = [p for p, cmd in _children(parent.pid).items() if "--shard 1/2" in cmd]
        assert len(worker) == 1, _children(parent.pid)
        os.kill(worker[0], signal.SIGKILL)
        parent.wait(timeout=300)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    err = log.read_text()
    assert parent.returncode == 1, err[-2000:]
    assert f"shard 1/2 on cpu: FAILED (exit {-signal.SIGKILL})" in " ".join(err.split())
    manifest_of_parts = json.loads(Path(f"{out}.shards.json").read_text())
    assert [p["complete"] for p in manifest_of_parts["parts"]] == [True, False]
    assert not Path(manifest_of_parts["parts"][1]["output"]).exists(), "shard 1 finished"
    done = [r["id"] for p in sorted(parts.glob("part-*.parquet"))
            for r in pq.read_table(p).to_pylist()]
    assert done
    for row_id in done:
        (tmp_path / "audio" / f"{row_id}.flac").write_bytes(b"spoiled")

    again = _run(args + ["--no-progress"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    got = [r for p in json.loads(Path(f"{out}.shards.json").read_text())["parts"]
           for r in pq.read_table(p["output"]).to_pylist()]
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)) == len(files)
    # Shard 1's rows finished before the kill were kept, not redone from the spoiled files.
    assert all(r["error"] is None and r["text"] for r in got), [
        r["error"] for r in got if r["error"]][:3]
