"""One writer per output: an exclusive ``fcntl`` lock held for the whole run.

``oasr transcribe`` takes the lock on ``<out>.lock`` (for a folder of subtitles,
``<folder>/.oasr.lock``) before the engine is built; a second process aimed at the same output
refuses at once, naming the holder's pid. Shards of one run therefore write one output each
(``-o folder/`` gives ``<name>.shard-i-of-n.<ext>``). The kernel drops the lock when its holder
dies, ``kill -9`` included, so a stale lock file never blocks a rerun; a clean exit removes it.

Taking the lock is also the writability check: creating the lock file beside the output fails
exactly where the output could not be written (a missing or read-only folder, a parent that is a
file, ``/proc``), before any audio is decoded.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from oasr.io.output_format import OutputError

__all__ = ["OutputLock", "lock_path"]


def lock_path(out: Path, folder: bool = False) -> Path:
    """The lock file guarding ``out`` (a file, or with ``folder`` a folder of files)."""
    return out / ".oasr.lock" if folder else out.with_name(f"{out.name}.lock")


def _unwritable(output: Path, folder: Path, err: OSError) -> OutputError:
    """Why ``output`` cannot be written, said of the path that is the problem."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        reason = f"{existing} is a file, not a folder"
    elif existing != folder:
        reason = f"cannot create the folder {folder} in {existing} ({err.strerror or err})"
    else:
        reason = f"cannot create files in {folder} ({err.strerror or err})"
    return OutputError(f"cannot write the output {output}: {reason}; choose an -o in a "
                       "writable folder")


class OutputLock:
    """An exclusive, non-blocking lock on ``path`` (the file named by :func:`lock_path`).

    Raises:
        OutputError: another live process holds it (its pid named), or the folder cannot be
            written (the output could not be either).
    """

    def __init__(self, path: Path, output: Path) -> None:
        self.path = path
        self.output = output
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise _unwritable(self.output, self.path.parent, err) from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise _unwritable(self.output, self.path.parent, err) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise _unwritable(self.output, self.path.parent, err) from None
                raise OutputError(
                    f"{self.output} is being written by another oasr process (pid {holder}); "
                    "wait for it, or give this run its own -o (shards: -o FOLDER/ names one "
                    "file per shard)") from None
            # The holder we waited out may have removed the file after we opened it: a lock
            # on an unlinked inode guards nothing, so retry on the file now at the path.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file (still holding the lock, so no other process is misled)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
