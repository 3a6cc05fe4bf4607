"""Rows in input order for the text outputs although they finish out of order."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from oasr.io import OutputWriter
from oasr.io.stdout_writer import StdoutWriter
from oasr.transcribe.input_order import InputOrder
from oasr.transcribe.runner import TranscribeOptions, transcribe
from tests.transcribe.conftest import SAMPLE_RATE, clip, write_wav


def test_items_leave_in_admission_order_and_the_buffer_fills():
    order: InputOrder[str] = InputOrder(capacity=2)
    for row_id in "abcd":
        order.admit(row_id)
    order.finish("c", "C")
    order.finish("b", "B")
    assert list(order.release()) == [] and order.full
    order.finish("a", "A")
    assert list(order.release()) == ["A", "B", "C"] and not order.full
    order.finish("d", "D")
    assert list(order.release()) == ["D"]


def test_a_repeated_id_keeps_both_rows_and_held_takes_the_gaps():
    order: InputOrder[str] = InputOrder()
    for row_id in ("x", "y", "x", "z"):
        order.admit(row_id)
    order.finish("x", "x1")
    order.finish("x", "x2")
    order.finish("z", "z")
    assert list(order.release()) == ["x1"]
    assert order.held() == ["x2", "z"]  # y never finished
    assert order.held() == []


def test_unordered_releases_as_rows_finish():
    order: InputOrder[str] = InputOrder(ordered=False)
    order.admit("a")
    order.admit("b")
    order.finish("b", "B")
    assert list(order.release()) == ["B"]


def _manifest(tmp_path: Path) -> tuple[Path, list[str]]:
    # A 25 s recording (three 10 s windows) first: it finishes after the clips behind it.
    speech = clip("1688-142285-0002")
    from oasr.audio import load_audio

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


@pytest.mark.parametrize("capacity", [1024, 1])
def test_jsonl_rows_come_out_in_input_order(tiny_engine, tmp_path, capacity):
    manifest, ids = _manifest(tmp_path)
    # The same run as it finishes (stdout streams in completion order): the long row is late.
    stream = io.StringIO()
    transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]), StdoutWriter(stream))
    finished = [json.loads(line)["id"] for line in stream.getvalue().splitlines()]
    assert sorted(finished) == sorted(ids) and finished != ids

    out = tmp_path / "out.jsonl"
    transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)], reorder_rows=capacity),
               OutputWriter(out, "jsonl"))
    assert _ids(out) == ids


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
    writer = OutputWriter(out, "jsonl")
    written: list[str] = []

    def stop_after_three(row, stats):
        written.append(row.id)
        if len(written) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]), writer,
                   on_row=stop_after_three)
    # The rows finished (held or written) are in the parts; a rerun does only the others.
    kept = OutputWriter(out, "jsonl").done_ids()
    assert written == ids[:3]
    # The rows held behind the long one, released with it, are kept although not yet taken.
    assert set(written) < kept
    again = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)]),
                       OutputWriter(out, "jsonl"))
    assert again.skipped == len(kept)
    assert sorted(_ids(out)) == sorted(ids)
