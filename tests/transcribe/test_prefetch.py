"""Audio decoded ahead on a thread pool: the same chunks, errors and rows as decoding inline."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from oasr.audio import AudioDecodeError, load_audio
from oasr.io import ManifestRow, OutputWriter
from oasr.transcribe.prefetch import AudioPrefetch, ChunkReadAhead, RowsAhead, default_workers
from oasr.transcribe.runner import TranscribeOptions, transcribe
from tests.transcribe.conftest import SAMPLE_RATE, clip, write_wav


def _chunks(n: int, fail_at: int | None = None) -> Iterator[np.ndarray]:
    for i in range(n):
        if i == fail_at:
            raise AudioDecodeError("x.flac", "is truncated", "re-encode it")
        yield np.full(3, i, dtype=np.float32)


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_read_ahead_yields_the_chunks_in_order(n):
    with ThreadPoolExecutor(2) as pool:
        got = list(ChunkReadAhead(lambda: _chunks(n), pool))
    assert [int(c[0]) for c in got] == list(range(n))


def test_a_decode_error_is_raised_after_the_chunks_before_it():
    with ThreadPoolExecutor(2) as pool:
        reader = ChunkReadAhead(lambda: _chunks(5, fail_at=3), pool)
        assert [int(next(reader)[0]) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(AudioDecodeError, match="truncated"):
            next(reader)
        assert next(reader, None) is None  # a failed reader is finished, as a generator is


def test_a_chunk_still_queued_is_decoded_on_the_readers_thread():
    gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(gate.wait)  # the only worker is busy
        reader = ChunkReadAhead(lambda: _chunks(2), pool)
        # Not waiting on the busy worker: the queued task is taken back and run here.
        assert [int(c[0]) for c in reader] == [0, 1]
        gate.set()


def test_rows_keep_their_order_and_a_manifest_error_comes_after_the_rows_before_it():
    def rows() -> Iterator[ManifestRow]:
        for i in range(5):
            yield ManifestRow(id=f"r{i}", audio=None if i == 2 else b"x",
                              error="bad row" if i == 2 else None)
        raise ValueError("duplicate id r0")

    opened: list[str] = []

    def open_chunks(row: ManifestRow) -> Iterator[np.ndarray]:
        opened.append(row.id)
        return _chunks(1)

    prefetch = AudioPrefetch(workers=2, depth=3)
    seen = []
    with pytest.raises(ValueError, match="duplicate"):
        for row in prefetch.rows(iter(rows()), open_chunks):
            seen.append(row.id)
            reader = prefetch.take(row)
            assert (reader is None) == (row.error is not None)  # error rows are not opened
            if reader is not None:
                assert len(list(reader)) == 1
    prefetch.close()
    assert seen == ["r0", "r1", "r2", "r3", "r4"]
    assert sorted(opened) == ["r0", "r1", "r3", "r4"]


def test_the_manifest_is_read_on_a_thread_of_its_own_and_stops_when_closed():
    threads: set[str] = set()
    produced: list[int] = []

    def rows() -> Iterator[ManifestRow]:
        for i in range(1000):
            threads.add(threading.current_thread().name)
            produced.append(i)
            yield ManifestRow(id=f"r{i}", audio=b"x")

    ahead = RowsAhead(rows(), depth=4)
    assert [next(ahead).id for _ in range(3)] == ["r0", "r1", "r2"]
    ahead.close()
    ahead._thread.join(timeout=5)
    assert not ahead._thread.is_alive()
    assert threads == {"oasr-manifest"}
    assert len(produced) < 20  # read at most depth ahead, then stopped


def test_default_workers_leaves_the_engine_a_core():
    assert 1 <= default_workers() <= 8


def _manifest(tmp_path: Path) -> Path:
    speech = load_audio(str(clip("1688-142285-0002")))
    long = write_wav(tmp_path / "long.wav", np.tile(speech, 12)[:25 * SAMPLE_RATE])
    silent = write_wav(tmp_path / "silent.wav", np.zeros(SAMPLE_RATE, dtype=np.float32))
    corrupt = tmp_path / "corrupt.flac"
    corrupt.write_bytes(clip("1688-142285-0003").read_bytes()[:3000])
    rows = [{"id": "long", "audio": str(long)}]
    rows += [{"id": f"short-{i}", "audio": str(clip(c))}
             for i, c in enumerate(("1688-142285-0004", "1688-142285-0005"))]
    rows += [{"id": "missing", "audio": str(tmp_path / "missing.wav")},
             {"id": "silent", "audio": str(silent)}, {"id": "corrupt", "audio": str(corrupt)},
             {"id": "segment", "audio": str(long), "offset": 3.0, "duration": 12.5}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_transcripts_with_and_without_the_decode_pool_are_identical(tiny_engine, tmp_path):
    manifest = _manifest(tmp_path)
    outs = {}
    for workers in (0, 3):
        out = tmp_path / f"out-{workers}.jsonl"
        # Unconditioned: the random tiny model's windows each close a segment then, which
        # the segment count below reads (prompted, it writes fewer timestamps).
        stats = transcribe(tiny_engine, TranscribeOptions(inputs=[str(manifest)],
                                                          decode_workers=workers,
                                                          condition_on_previous_text=False),
                           OutputWriter(out, "jsonl"))
        assert stats.rows == 7
        outs[workers] = [json.loads(line) for line in out.read_text().splitlines()]
    assert outs[3] == outs[0]
    by_id = {r["id"]: r for r in outs[3]}
    assert by_id["missing"]["error"] and by_id["corrupt"]["error"]
    assert by_id["silent"]["finish_reason"] == "no_speech"
    assert len(by_id["long"]["segments"]) >= 3  # read window after window through the pool
