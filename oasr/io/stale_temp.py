"""Temp files a killed writer left behind: ``<name>.tmp-<pid>`` whose pid is no longer alive.

Every writer writes ``<name>.tmp-<its pid>`` and renames it into place; a ``kill -9`` between
the two leaves the temp file. A rerun removes those of dead processes (a live pid's file may be
another writer's work in progress, and is left alone).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["pid_alive", "remove_stale_temps"]

_TMP = re.compile(r"\.tmp-(\d+)$")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def remove_stale_temps(folder: Path, prefix: str) -> list[Path]:
    """Remove ``folder/<prefix>*.tmp-<pid>`` files of dead pids; returns those removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP.search(entry.name)
        if not (m and entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False)):
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and not pid_alive(pid):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed.append(Path(entry.path))
    return removed
