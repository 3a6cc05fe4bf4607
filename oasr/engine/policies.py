"""The built-in batching and partition policies.

A request's cost is what its forward costs: its feature frames, or, for a fixed-window
frontend (Whisper's 30 s), the window, so every row costs the same and padding waste cannot
exist. Policies get that cost as a callable so they never look inside a request.

Registered lazily by name in ``oasr.engine.batching``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr.engine.batching import BatchingPolicy, PartitionPolicy

Cost = Callable[[Any], int]


def pad_ratio(costs: list[int]) -> float:
    """Fraction of a padded batch that is padding."""
    if not costs:
        return 0.0
    total = max(costs) * len(costs)
    return (total - sum(costs)) / total if total else 0.0


class _CostPolicy(BatchingPolicy):
    def __init__(self, cost: Cost, max_pad_ratio: float = 0.3) -> None:
        self.cost = cost
        self.max_pad_ratio = max_pad_ratio

    def _take(self, waiting: list[Any], chosen: list[Any]) -> list[Any]:
        ids = {id(r) for r in chosen}
        waiting[:] = [r for r in waiting if id(r) not in ids]
        return chosen


class FcfsPolicy(_CostPolicy):
    """Arrival order."""

    def select(self, waiting: list[Any], max_batch: int) -> list[Any]:
        return self._take(waiting, waiting[:max_batch])


class SjfPolicy(_CostPolicy):
    """Shortest first: least padding and lowest mean latency, may starve long requests."""

    def select(self, waiting: list[Any], max_batch: int) -> list[Any]:
        order = sorted(waiting, key=self.cost)
        return self._take(waiting, order[:max_batch])


class BucketPolicy(_CostPolicy):
    """The oldest request plus its nearest neighbours by cost, within ``max_pad_ratio``.

    The oldest always goes, so nothing starves; its companions are the waiting requests whose
    cost is closest to it, added while the batch's padding stays within the ratio.
    """

    def select(self, waiting: list[Any], max_batch: int) -> list[Any]:
        if not waiting:
            return []
        anchor = waiting[0]
        c0 = self.cost(anchor)
        rest = sorted(waiting[1:], key=lambda r: abs(self.cost(r) - c0))
        chosen = [anchor]
        costs = [c0]
        for r in rest:
            if len(chosen) >= max_batch:
                break
            c = self.cost(r)
            if pad_ratio(costs + [c]) <= self.max_pad_ratio:
                chosen.append(r)
                costs.append(c)
        return self._take(waiting, chosen)


class CountPartition(PartitionPolicy):
    """Micro-batches of at most ``max_batch_size`` rows."""

    def __init__(self, cost: Cost, max_batch_size: int, max_batch_frames: int = 0) -> None:
        self.cost = cost
        self.max_batch_size = max_batch_size
        self.max_batch_frames = max_batch_frames

    def partition(self, requests: list[Any]) -> list[list[Any]]:
        n = self.max_batch_size
        return [requests[i:i + n] for i in range(0, len(requests), n)]


class FramesPartition(CountPartition):
    """Micro-batches whose padded size (rows x longest) stays within ``max_batch_frames``."""

    def partition(self, requests: list[Any]) -> list[list[Any]]:
        if self.max_batch_frames <= 0:
            return super().partition(requests)
        out: list[list[Any]] = []
        cur: list[Any] = []
        longest = 0
        for r in sorted(requests, key=self.cost):
            c = self.cost(r)
            if cur and (max(longest, c) * (len(cur) + 1) > self.max_batch_frames
                        or len(cur) >= self.max_batch_size):
                out.append(cur)
                cur, longest = [], 0
            cur.append(r)
            longest = max(longest, c)
        if cur:
            out.append(cur)
        return out
