"""Temp files of dead writers are removed; a live process's are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from oasr.io.stale_temp import pid_alive, remove_stale_temps
from oasr.io.writer import OutputWriter


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_dead_pids_temp_files_go(tmp_path: Path) -> None:
    dead = _dead_pid()
    assert not pid_alive(dead) and pid_alive(os.getpid())
    stale = tmp_path / f"o.parquet.tmp-{dead}"
    live = tmp_path / f"o.parquet.tmp-{os.getppid()}"
    other = tmp_path / f"x.parquet.tmp-{dead}"
    for p in (stale, live, other):
        p.write_bytes(b"")
    assert remove_stale_temps(tmp_path, "o.parquet.tmp-") == [stale]
    assert live.exists() and other.exists()


def test_opening_a_writer_removes_its_outputs_stale_temps(tmp_path: Path) -> None:
    dead = _dead_pid()
    out = tmp_path / "o.parquet"
    stale = tmp_path / f"o.parquet.tmp-{dead}"
    stale.write_bytes(b"")
    parts = tmp_path / "o.parquet.parts"
    parts.mkdir()
    stale_part = parts / f".part-000003.parquet.tmp-{dead}"
    stale_part.write_bytes(b"")
    OutputWriter(out)
    assert not stale.exists() and not stale_part.exists()
