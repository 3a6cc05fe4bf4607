"""Per-thread counters merged on read: no lost counts under threads, a race-free reset."""

from __future__ import annotations

import threading

from oasr import ops
from oasr.ops import counting
from tests.ops.conftest import FakeCudaTensor


def test_counts_from_many_threads_are_all_kept():
    route = ops.route("linear", "gemm")
    n_threads, per_thread = 8, 5000
    start = threading.Barrier(n_threads)

    def work() -> None:
        start.wait()
        x = FakeCudaTensor()
        for _ in range(per_thread):
            route.select(x)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ops.gap_counts() == {("gap", "gemm"): n_threads * per_thread}


def test_reset_is_a_baseline_and_counts_since_gives_one_run():
    counting.count(("kernel", "a"))
    before = ops.snapshot()
    counting.count(("kernel", "a"))
    counting.count(("gap", "b"))
    assert ops.counts_since(before) == {("gap", "b"): 1, ("kernel", "a"): 1}
    ops.reset_counts()
    assert ops.gap_counts() == {}
    counting.count(("gap", "b"))
    assert ops.gap_counts() == {("gap", "b"): 1}
    assert ops.counts_since(before) == {("gap", "b"): 2, ("kernel", "a"): 1}


def test_a_finished_threads_counts_are_kept():
    t = threading.Thread(target=lambda: counting.count(("policy", "x")))
    t.start()
    t.join()
    assert ops.gap_counts() == {("policy", "x"): 1}
