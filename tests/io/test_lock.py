"""``OutputLock``: one writer per output, and the writability check before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oasr.io.lock import OutputLock, lock_path
from oasr.io.output_format import OutputError


def test_a_second_lock_on_one_output_refuses_naming_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    first = OutputLock(lock_path(out), out).acquire()
    assert lock_path(out).read_text().strip() == str(os.getpid())
    with pytest.raises(OutputError, match=rf"being written by another oasr process "
                                          rf"\(pid {os.getpid()}\)"):
        OutputLock(lock_path(out), out).acquire()
    first.release()
    assert not lock_path(out).exists()
    with OutputLock(lock_path(out), out):  # free again
        assert lock_path(out).exists()


def test_a_dead_holder_does_not_block(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    script = ("import os, sys\nfrom pathlib import Path\nfrom oasr.io.lock import OutputLock\n"
              "p = Path(sys.argv[1])\nOutputLock(p.with_name(p.name + '.lock'), p).acquire()\n"
              "os._exit(0)\n")  # dies holding it, the lock file left behind
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script, str(out)], check=True, cwd=repo,
                   env={**os.environ, "PYTHONPATH": str(repo)})
    assert lock_path(out).exists()
    with OutputLock(lock_path(out), out):
        assert lock_path(out).read_text().strip() == str(os.getpid())


def test_a_folder_output_locks_inside_the_folder(tmp_path: Path) -> None:
    assert lock_path(tmp_path / "subs", folder=True) == tmp_path / "subs" / ".oasr.lock"
    with OutputLock(lock_path(tmp_path / "subs", folder=True), tmp_path / "subs"):
        assert (tmp_path / "subs").is_dir()


def test_an_unwritable_place_says_which_path_is_wrong(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = afile / "deeper" / "o.parquet"
    with pytest.raises(OutputError, match=rf"{afile} is a file, not a folder"):
        OutputLock(lock_path(out), out).acquire()
