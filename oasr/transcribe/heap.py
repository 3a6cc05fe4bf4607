"""A fixed glibc mmap threshold, so a long run's heap does not creep.

glibc serves allocations above ``M_MMAP_THRESHOLD`` with their own ``mmap`` (returned to the
system on free) and below it from the heap. By default the threshold moves up, to as much as
32 MiB, each time a large mmapped block is freed; from then on the engine's many medium tensors
(encoder windows, decoder KV, a decode group's buffers, sized by batch and length, all
different) come from the heap, fragment it, and the resident set ratchets up with the rows.
Setting the threshold pins it (glibc stops moving it): blocks of ``MMAP_THRESHOLD`` and more
are always mmapped. A user's own ``MALLOC_MMAP_THRESHOLD_`` is left alone; elsewhere than
glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["MMAP_THRESHOLD", "pin_mmap_threshold"]

MMAP_THRESHOLD = 1 << 20  # 1 MiB
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def pin_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold at ``nbytes``; True when it was set."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, int(nbytes)))
