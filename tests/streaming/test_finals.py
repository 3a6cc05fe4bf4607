"""Stream finals on disk: Parquet finals in whole parts as they come (a kill keeps them),
merged with the earlier finals at close; JSONL appended; a failed write is one error."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from oasr.io import OutputError
from oasr.streaming import StreamResult, Word
from oasr.streaming.finals import FinalsWriter

REPO = Path(__file__).resolve().parents[2]


def result(k: int) -> StreamResult:
    return StreamResult(committed=f"final {k}", words=[Word(f"w{k}", k, k + 0.5)],
                        is_final=True, start=float(k), end=k + 0.5, segment=k)


def texts(path: Path) -> list[str]:
    return pq.ParquetFile(path).read().column("text").to_pylist()


def test_parquet_finals_reach_disk_in_parts_and_close_appends_them(tmp_path: Path) -> None:
    out = tmp_path / "finals.parquet"
    w = FinalsWriter(out, flush_rows=2)
    for k in range(5):
        w.write("a.wav", result(k))
    parts = sorted(Path(f"{out}.parts").glob("part-*.parquet"))
    assert [len(texts(p)) for p in parts] == [2, 2]  # whole files, readable before close
    w.close()
    assert texts(out) == [f"final {k}" for k in range(5)]
    assert not Path(f"{out}.parts").exists() and not Path(f"{out}.lock").exists()
    again = FinalsWriter(out)  # a rerun appends after them
    again.write("b.wav", result(7))
    again.close()
    assert texts(out) == [f"final {k}" for k in (0, 1, 2, 3, 4, 7)]
    assert pq.read_schema(out).metadata[b"oasr_output"] == b"stream-finals"


def test_finals_wait_at_most_flush_seconds(tmp_path: Path) -> None:
    out = tmp_path / "finals.parquet"
    w = FinalsWriter(out, flush_seconds=0.05)
    w.write("a.wav", result(0))
    assert not Path(f"{out}.parts").exists()
    time.sleep(0.1)
    w.flush_if_due()
    assert len(list(Path(f"{out}.parts").glob("part-*.parquet"))) == 1
    w.close()


def test_a_kill_keeps_every_flushed_final_and_the_next_run_folds_them_in(
        tmp_path: Path) -> None:
    out = tmp_path / "finals.parquet"
    first = FinalsWriter(out)
    first.write("a.wav", result(0))
    first.close()
    script = (
        "import sys, time\n"
        "from oasr.streaming.finals import FinalsWriter\n"
        "from tests.streaming.test_finals import result\n"
        f"w = FinalsWriter({str(out)!r}, flush_rows=2)\n"
        "for k in range(1, 6):\n"
        "    w.write('b.wav', result(k))\n"
        "print('written', flush=True)\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == b"written"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    parts = sorted(Path(f"{out}.parts").glob("part-*.parquet"))
    assert [t for p in parts for t in texts(p)] == [f"final {k}" for k in range(1, 5)]
    assert texts(out) == ["final 0"]  # the earlier finals, untouched
    w = FinalsWriter(out)  # the dead writer's lock is gone with it
    w.write("c.wav", result(9))
    w.close()
    # Final 5 was buffered, never flushed: the kill took it. Nothing else is lost.
    assert texts(out) == ["final 0", "final 1", "final 2", "final 3", "final 4", "final 9"]


def test_a_full_disk_is_one_error_and_abort_stays_quiet(tmp_path: Path, monkeypatch) -> None:
    from oasr.streaming import finals

    out = tmp_path / "finals.parquet"
    w = FinalsWriter(out, flush_rows=1)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(finals.pq, "write_table", full)
    with pytest.raises(OutputError, match=f"cannot write finals to {out}: No space left on "
                                          "device; kept: the finals in"):
        w.write("a.wav", result(0))
    assert w.failed
    w.abort()
    assert not Path(f"{out}.lock").exists()
