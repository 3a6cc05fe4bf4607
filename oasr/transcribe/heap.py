"""A fixed glibc mmap threshold, so a long run's heap does not creep.

glibc serves allocations above ``M_MMAP_THRESHOLD`` with their own ``mmap`` (returned to the
system on free) and below it from the heap. By default the threshold moves up, to as much as
32 MiB, each time a large mmapped block is freed; from then on the engine's many medium tensors
(encoder windows, decoder KV, a decode group's buffers, sized by batch and length, all
different) come from the heap, fragment it, and the resident set can ratchet up with the rows.
Setting the threshold pins it (glibc stops moving it). A low one costs CPU speed: every block
above it is page-faulted in anew at each allocation, and an encoder allocates its activations
afresh at every layer; 8 MiB kept the resident set as flat as 1 MiB did, at most of the speed
of the unpinned heap (docs/engine.md, "Memory against rows"). A user's own
``MALLOC_MMAP_THRESHOLD_`` is left alone; elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["MMAP_THRESHOLD", "pin_mmap_threshold"]

MMAP_THRESHOLD = 8 << 20  # 8 MiB
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
