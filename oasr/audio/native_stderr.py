"""libmpg123 (inside libsndfile) prints notes such as ``Note: Illegal Audio-MPEG-Header ... at
offset ...`` and ``Trying to resync...`` straight to file descriptor 2, under the progress bar,
for MP3s that decode fine after a resync. There is no libsndfile option to quiet it, so fd 2
points at ``/dev/null`` while the native decoder runs; what matters still arrives as the
decoder's error code, which the readers turn into an :class:`AudioDecodeError`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["native_stderr_silenced"]


@contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """fd 2 -> /dev/null inside, restored after (Python's own ``sys.stderr`` is flushed first
    so nothing it buffered is lost)."""
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 at all: nothing to protect
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
