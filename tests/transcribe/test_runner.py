"""``transcribe`` with a tiny random Whisper: error rows, stitching, real containers, an hour."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf

from oasr.audio import load_audio
from oasr.engine.request import Request
from oasr.io import OutputWriter
from oasr.transcribe.runner import TranscribeOptions, transcribe
from tests.transcribe.conftest import MISC, SAMPLE_RATE, clip, write_wav

REPO = Path(__file__).resolve().parents[2]


def _run(engine, inputs, tmp_path: Path, name: str = "out.parquet", **options):
    writer = OutputWriter(tmp_path / name)
    stats = transcribe(engine, TranscribeOptions(inputs=[str(i) for i in inputs], **options),
                       writer)
    rows = {r["id"]: r for r in pq.read_table(tmp_path / name).to_pylist()}
    return stats, rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _decode_alone(engine, audio: np.ndarray) -> str:
    (out,) = list(engine.run([Request("alone", audio)]))
    assert out.error is None
    return out.text


def test_bad_rows_become_error_rows_while_good_rows_are_transcribed(tiny_engine, tmp_path):
    good = [clip("1688-142285-0002"), clip("1688-142285-0003")]
    truncated = tmp_path / "truncated.flac"
    truncated.write_bytes(good[0].read_bytes()[:400])
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"this is a text file, not a recording\n" * 20)
    # 40 s cut at two thirds of its bytes (~27 s): two windows are decoding when it fails.
    long = tmp_path / "long.flac"
    sf.write(long, np.tile(load_audio(str(good[1])), 8)[:40 * SAMPLE_RATE], SAMPLE_RATE)
    truncated_late = tmp_path / "truncated-late.flac"
    truncated_late.write_bytes(long.read_bytes()[:long.stat().st_size * 2 // 3])
    silent = write_wav(tmp_path / "silent.wav", np.zeros(3 * SAMPLE_RATE, np.float32))
    nan = write_wav(tmp_path / "nan.wav", np.full(SAMPLE_RATE, np.nan, np.float32),
                    subtype="FLOAT")
    bad = {  # id -> (audio path, what the message must say)
        "missing": (tmp_path / "missing.flac", "does not exist"),
        "truncated": (truncated, r"truncated or corrupt|not a readable audio file"),
        "truncated-late": (truncated_late, r"truncated or corrupt: decoding failed after 2\d\."),
        "empty": (write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32)), "0 samples"),
        "nan": (nan, "NaN"),
        "junk": (junk, "holds text, not audio"),
        "null-audio": (None, "no audio"),
    }
    entries = [{"id": "good-0", "audio": str(good[0])}]
    entries += [{"id": k, "audio": p and str(p)} for k, (p, _) in bad.items()]
    entries += [{"id": "silent", "audio": str(silent)}]
    entries += [{"id": "good-1", "audio": str(good[1])}]
    manifest = _write_jsonl(tmp_path / "m.jsonl", entries)
    line = {e["id"]: n for n, e in enumerate(entries, start=1)}

    stats, rows = _run(tiny_engine, [manifest], tmp_path)

    assert set(rows) == set(line)
    assert stats.rows == len(entries)
    assert stats.errors == len(bad)
    for row_id, (path, problem) in bad.items():
        row = rows[row_id]
        assert row["text"] is None and row["segments"] is None
        message = row["error"]
        assert message is not None, row_id
        assert f"{manifest} line {line[row_id]}" in message, message  # names the row
        if row_id != "null-audio":  # what the audio reader says names the file
            assert path.name in message, message
        assert re.search(problem, message), message  # and the problem
    # Digital silence is valid audio in which nothing is said: empty text, and why.
    assert rows["silent"]["error"] is None and rows["silent"]["text"] == ""
    assert rows["silent"]["finish_reason"] == "no_speech"
    assert rows["silent"]["duration"] == pytest.approx(3.0)
    assert stats.finish_reasons["no_speech"] == 1
    for k, path in enumerate(good):
        row = rows[f"good-{k}"]
        assert row["error"] is None
        assert row["duration"] == pytest.approx(sf.info(str(path)).duration, abs=1e-3)
        # One window: the row's text is what the engine makes of the whole clip on its own.
        assert row["text"] == _decode_alone(tiny_engine, load_audio(str(path)))
        assert row["text"]
        # One window, one segment: the whole clip.
        assert [(s["start"], s["text"]) for s in row["segments"]] == [(0.0, row["text"])]
        assert row["segments"][0]["end"] == pytest.approx(row["duration"])
        assert row["finish_reason"] == "stop"
        assert 0.0 < row["confidence"] <= 1.0


def _count_windows(engine, monkeypatch) -> Counter:
    """Windows the engine decodes, per row id, from here on (whatever drives ``step``)."""
    seen: Counter = Counter()
    step = engine.step

    def counting_step():
        outs = step()
        seen.update(o.metadata.get("row") for o in outs)
        return outs

    monkeypatch.setattr(engine, "step", counting_step)
    return seen


def test_a_long_row_has_one_segment_per_window_on_the_recording_clock(tiny_engine, tmp_path,
                                                                      monkeypatch):
    path = clip("1688-142285-0000")  # 15 s: more than the 10 s window
    offset, duration = 1.5, 12.0
    manifest = _write_jsonl(tmp_path / "m.jsonl", [
        {"id": "whole", "audio": str(path)},
        {"id": "part", "audio": str(path), "offset": offset, "duration": duration},
    ])
    windows = _count_windows(tiny_engine, monkeypatch)
    # Unconditioned: prompted, the random tiny model ends later windows at once.
    _, rows = _run(tiny_engine, [manifest], tmp_path, condition_on_previous_text=False)
    window_s = tiny_engine.inputs.config.fixed_window_seconds
    for row_id, start, length in (("whole", 0.0, 15.0), ("part", offset, duration)):
        row = rows[row_id]
        assert row["error"] is None
        assert row["duration"] == pytest.approx(length)
        segments = row["segments"]
        # The tiny model writes one token per window: one segment each.
        assert len(segments) == windows[row_id] >= 2
        # In order, on the recording's clock, inside the row's part of it, ending at its end.
        assert start <= segments[0]["start"] < start + window_s
        assert segments[-1]["end"] == pytest.approx(start + length)
        for a, b in zip(segments, segments[1:]):
            assert a["start"] <= a["end"] <= b["start"] + 1e-6
        # The texts make up the row's text.
        assert row["text"]
        assert " ".join(s["text"] for s in segments).split() == row["text"].split()


def test_every_misc_container_transcribes_with_its_duration(tiny_engine, tmp_path):
    table = MISC / "transcripts.tsv"
    if not table.is_file():
        pytest.skip(f"needs {table}")
    with open(table, encoding="utf-8") as f:
        expected = {Path(r["file"]).stem: float(r["duration"])
                    for r in csv.DictReader(f, delimiter="\t")}
    stats, rows = _run(tiny_engine, [MISC / "audio"], tmp_path)
    assert set(rows) == set(expected)
    assert stats.errors == 0, stats.error_examples
    for row_id, seconds in expected.items():
        row = rows[row_id]
        assert row["error"] is None
        assert row["text"], row_id
        assert row["duration"] == pytest.approx(seconds, abs=0.1), row_id


_HOUR_SCRIPT = """
import json, resource, sys
import numpy as np
import torch
from oasr.engine.request import Request
from oasr.io import OutputWriter
from oasr.transcribe.runner import TranscribeOptions, transcribe
from tests.transcribe.conftest import build_tiny_engine

def rss_mb():
    # VmHWM is this process's own peak; ru_maxrss would carry the parent's peak across fork+exec.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

src, out, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)  # as tests.helpers.tiny_whisper.torch_threads
engine = build_tiny_engine(window_s=30.0, max_batch_size=batch)
# Warm up (the first forward loads kernels), then take the baseline.
list(engine.run([Request("warm", np.full(16000, 0.1, np.float32))]))
base = rss_mb()
windows = 0
step = engine.step

def counting_step():
    global windows
    outs = step()
    windows += len(outs)
    return outs

engine.step = counting_step
# Unconditioned: prompted, the random tiny model ends later windows at once (no segment).
stats = transcribe(engine, TranscribeOptions(inputs=[src], condition_on_previous_text=False),
                   OutputWriter(out))
print(json.dumps({"base_mb": base, "peak_mb": rss_mb(), "rows": stats.rows,
                  "errors": stats.errors, "windows": windows}))
"""


@pytest.mark.slow
def test_an_hour_long_recording_transcribes_in_bounded_memory(tmp_path):
    source = clip("1688-142285-0000")
    hour = tmp_path / "hour.flac"
    speech, sr = sf.read(str(source), dtype="int16")
    assert sr == SAMPLE_RATE
    total = 3600 * sr
    with sf.SoundFile(str(hour), "w", sr, 1, subtype="PCM_16", format="FLAC") as f:
        for start in range(0, total, len(speech)):
            f.write(speech[:total - start])
    out = tmp_path / "hour.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _HOUR_SCRIPT, str(hour), str(out), "8"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"1-hour run: peak RSS {report['peak_mb']:.0f} MB, "
          f"{report['peak_mb'] - report['base_mb']:.0f} MB over the warmed-up engine, "
          f"{report['windows']} windows")
    assert (report["rows"], report["errors"]) == (1, 0)
    (row,) = pq.read_table(out).to_pylist()
    assert row["error"] is None
    assert row["duration"] == pytest.approx(3600.0)
    segments = row["segments"]
    # One token, so one segment, per window; 30 s windows cover the hour in at least 120.
    assert len(segments) == report["windows"] >= 120
    assert 0.0 <= segments[0]["start"] < 30.0
    assert segments[-1]["end"] == pytest.approx(3600.0)
    for a, b in zip(segments, segments[1:]):
        assert a["start"] <= a["end"] <= b["start"] + 1e-6
    hour_mb = total * 4 / 2**20  # the decoded hour as float32: 220 MiB
    assert report["peak_mb"] < 1200
    # Holding the decoded hour alone would add more than this; the run holds a few windows.
    assert report["peak_mb"] - report["base_mb"] < 0.7 * hour_mb

