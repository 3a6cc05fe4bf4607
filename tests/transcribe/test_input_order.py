"""Rows in input order for a file output although they finish out of order, across a resume
and an interruption (the reorder buffer itself: ``test_faults``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from oasr.audio import load_audio
from oasr.io import OutputWriter
from oasr.transcribe.runner import TranscribeOptions, transcribe
from tests.transcribe.conftest import SAMPLE_RATE, clip, write_wav


def _manifest(tmp_path: Path) -> tuple[Path, list[str]]:
    # A 25 s recording (three 10 s windows) first: it finishes after the clips behind it.
    speech = clip("1688-142285-0002")
    long = write_wav(tmp_path / "long.wav",
                     np.tile(load_audio(str(speech)), 4)[:25 * SAMPLE_RATE])
    rows = [{"id": "long", "audio": str(long)}]
    rows += [{"id": f"short-{i}", "audio": str(speech)} for i in range(4)]
    rows += [{"id": "missing", "audio": str(tmp_path / "missing.wav")}]  # an error row
    rows += [{"id": "short-last", "audio": str(speech)}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, [r["id"] for r in rows]


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_txt_rows_come_out_in_input_order_and_a_resume_keeps_it(tiny_engine, tmp_path):
    manifest, ids = _manifest(tmp_path)
    out = tmp_path / "out.txt"
    first = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)], limit=3),
                       OutputWriter(out, "txt"))
    assert first.rows == 3
    assert [line.split("\t")[0] for line in out.read_text().splitlines()] == ids[:3]
    again = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                       OutputWriter(out, "txt"))
    assert again.skipped == 3 and again.rows == len(ids) - 3
    assert [line.split("\t")[0] for line in out.read_text().splitlines()] == ids


def test_an_interrupted_run_keeps_the_rows_it_held(tiny_engine, tmp_path):
    manifest, ids = _manifest(tmp_path)
    out = tmp_path / "out.jsonl"
    written: list[str] = []

    def stop_after_three(row, stats):
        written.append(row.id)
        if len(written) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                   OutputWriter(out, "jsonl"), on_row=stop_after_three)
    assert written == ids[:3]
    # The rows finished behind the long one but not yet yielded are in the parts too.
    kept = OutputWriter(out, "jsonl").done_ids()
    assert set(written) < kept
    again = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                       OutputWriter(out, "jsonl"))
    assert again.skipped == len(kept) and again.rows == len(ids) - len(kept)
    assert sorted(_ids(out)) == sorted(ids)
