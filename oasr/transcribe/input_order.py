"""Finished rows back in input order: the bounded reorder buffer between the transcriber and
an ordered output (JSONL, txt, the per-recording formats).

Rows finish out of order (a long recording finishes after the short ones behind it, a batch's
rows stop at different steps); a row is held until every row admitted before it has finished.
At most ``capacity`` finished rows are held: when that many wait on an earlier row, the
transcriber admits no new row until the earlier one finishes, so memory stays bounded and
the order is never broken. Held rows are not yet on disk: a ``kill -9`` loses them (at most
``capacity``), an interrupted run writes them on its way out (:meth:`InputOrder.held`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["REORDER_ROWS", "InputOrder"]

T = TypeVar("T")

# Finished rows held back at most, waiting on an earlier row.
REORDER_ROWS = 1024


class InputOrder(Generic[T]):
    """Releases the items of admitted rows in admission order (``ordered``), or as they
    finish (not ``ordered``: Parquet, the Python API's iterator)."""

    def __init__(self, ordered: bool = True, capacity: int = REORDER_ROWS) -> None:
        if capacity < 1:
            raise ValueError(f"the reorder buffer needs capacity >= 1, got {capacity}")
        self.ordered = ordered
        self.capacity = capacity
        self._next = 0  # sequence number of the next admitted row
        self._head = 0  # sequence number of the next row to release
        self._pending: dict[str, deque[int]] = {}  # row id -> its unfinished sequence numbers
        self._finished: dict[int, T] = {}
        self._out: deque[T] = deque()  # released, not yet taken

    def admit(self, row_id: str) -> None:
        """Row ``row_id`` enters: its item is released after those admitted before it."""
        if self.ordered:
            self._pending.setdefault(row_id, deque()).append(self._next)
            self._next += 1

    def finish(self, row_id: str, item: T) -> None:
        """Row ``row_id`` finished with ``item`` (its oldest unfinished admission, if the id
        repeats). A row never admitted is released at once."""
        seqs = self._pending.get(row_id) if self.ordered else None
        if not seqs:
            self._out.append(item)
            return
        seq = seqs.popleft()
        if not seqs:
            del self._pending[row_id]
        self._finished[seq] = item
        while self._head in self._finished:
            self._out.append(self._finished.pop(self._head))
            self._head += 1

    def release(self) -> Iterator[T]:
        """The items now free to go, in order, each taken as it is yielded: one not yet taken
        when the consumer stops is still :meth:`held`."""
        while self._out:
            yield self._out.popleft()

    @property
    def full(self) -> bool:
        """Whether ``capacity`` finished rows wait on an earlier row (admit no more)."""
        return len(self._finished) >= self.capacity

    def held(self) -> list[T]:
        """Take every held item, in order, gaps and all (for a run that stops early)."""
        items = list(self._out) + [self._finished[s] for s in sorted(self._finished)]
        self._out.clear()
        self._finished.clear()
        return items
