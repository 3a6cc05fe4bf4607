"""Batching and partition policies (registry-built, cost as a callable)."""

from __future__ import annotations

import pytest

from oasr.engine.batching import build_batching_policy, build_partition_policy
from oasr.engine.policies import pad_ratio
from oasr.registry import UnknownNameError


def cost(x: int) -> int:
    return x


def test_fcfs_takes_arrival_order_and_removes_chosen():
    waiting = [5, 1, 9, 3]
    chosen = build_batching_policy("fcfs", cost=cost).select(waiting, 2)
    assert chosen == [5, 1] and waiting == [9, 3]


def test_sjf_takes_shortest_first():
    waiting = [5, 1, 9, 3]
    assert build_batching_policy("sjf", cost=cost).select(waiting, 2) == [1, 3]
    assert waiting == [5, 9]


def test_bucket_keeps_oldest_and_bounds_padding():
    waiting = [100, 10, 95, 90, 300, 98]
    policy = build_batching_policy("bucket", cost=cost, max_pad_ratio=0.1)
    chosen = policy.select(waiting, 8)
    assert chosen[0] == 100  # the oldest always goes: nothing starves
    assert set(chosen) == {100, 98, 95, 90}
    assert pad_ratio([cost(c) for c in chosen]) <= 0.1
    assert waiting == [10, 300]


def test_bucket_with_fixed_window_cost_is_fcfs():
    # A fixed-window frontend costs every row the same: no padding exists, order is arrival.
    waiting = list(range(10))
    policy = build_batching_policy("bucket", cost=lambda r: 3000, max_pad_ratio=0.0)
    assert policy.select(waiting, 4) == [0, 1, 2, 3]


def test_count_partition():
    p = build_partition_policy("count", cost=cost, max_batch_size=3)
    assert p.partition(list(range(7))) == [[0, 1, 2], [3, 4, 5], [6]]


def test_frames_partition_bounds_padded_frames():
    p = build_partition_policy("frames", cost=cost, max_batch_size=8, max_batch_frames=300)
    batches = p.partition([100, 50, 100, 200, 20, 60])
    for b in batches:
        assert max(b) * len(b) <= 300 or len(b) == 1
    assert sorted(x for b in batches for x in b) == [20, 50, 60, 100, 100, 200]


def test_no_partition_promises_a_packed_forward():
    # Every micro-batch is one padded forward; a packing partition would assume a varlen one.
    with pytest.raises(UnknownNameError, match="valid: count, frames"):
        build_partition_policy("packing", cost=cost, max_batch_size=8)


def test_unknown_policy_lists_valid():
    with pytest.raises(UnknownNameError, match="valid: bucket, fcfs, sjf"):
        build_batching_policy("lifo", cost=cost)
