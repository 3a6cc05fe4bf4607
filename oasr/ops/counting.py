"""Dispatch counters: one per thread, merged on read, so counting a call takes no lock.

Each thread increments its own dict (only that thread writes it); a read sums every thread's
dict (``dict(d)`` copies atomically under the GIL). ``reset_counts`` does not clear what other
threads are writing: it records a baseline that later reads subtract, so a reset racing an
increment cannot lose or resurrect a count. ``snapshot`` / ``counts_since`` give a run its own
counts in a process that has counted before.
"""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["CASES", "Counts", "count", "counts_since", "gap_counts", "reset_counts", "snapshot"]

# The cases every routed call lands in, in report order; ``quantized``: a quantized layer's
# call, served by its quantization method (oasr.quantization), named ``method:lane``.
CASES = ("kernel", "gap", "policy", "out_of_scope", "torch_backend", "quantized")

Counts = dict[tuple[str, str], int]
_ALL: list[dict[tuple[str, str], int]] = []
_REGISTER = threading.Lock()  # taken once per thread, at its first count
_BASELINE: list[Counter[tuple[str, str]]] = [Counter()]


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        with _REGISTER:
            _ALL.append(self.counts)


_LOCAL = _PerThread()


def count(key: tuple[str, str]) -> None:
    """Count one call under ``key`` = (case, name); lock-free."""
    c = _LOCAL.counts
    c[key] = c.get(key, 0) + 1


def _merged() -> Counter[tuple[str, str]]:
    with _REGISTER:
        tables = list(_ALL)
    total: Counter[tuple[str, str]] = Counter()
    for t in tables:
        total.update(dict(t))
    return total


def snapshot() -> Counts:
    """Every count since the process started (a baseline for ``counts_since``)."""
    return dict(_merged())


def counts_since(base: Counts) -> Counts:
    """The calls counted after ``base = snapshot()``: (case, name) -> calls, zeros dropped."""
    now = _merged()
    now.subtract(base)
    return {k: n for k, n in sorted(now.items()) if n > 0}


def gap_counts() -> Counts:
    """The calls counted since the last ``reset_counts`` (or the start)."""
    return counts_since(_BASELINE[0])


def reset_counts() -> None:
    _BASELINE[0] = _merged()
