"""``StepGraphs``: one capture per key, the least recently used evicted past the limit, a
failed capture said once and capture turned off; frame capacities are powers of two."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.step_graphs import StepGraphs, frame_capacity


class FakeCapture:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[object] = []
        self.fail = fail

    def __call__(self, body, buffers, device):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        body(buffers)
        self.calls.append(buffers)
        return f"graph{len(self.calls)}"


def _get(graphs, key):
    return graphs.get(key, lambda: {"key": key}, lambda b: None, torch.device("cpu"))


def test_one_capture_per_key_and_lru_eviction():
    cap = FakeCapture()
    graphs = StepGraphs("test", max_captures=2, capture=cap)
    a = _get(graphs, "a")
    assert _get(graphs, "a")[1] is a[1] and graphs.captures == 1  # a hit: no new capture
    _get(graphs, "b")
    _get(graphs, "a")  # a is now the most recently used
    graph, buffers = _get(graphs, "c")  # evicts b
    assert buffers == {"key": "c"} and graph == "graph3"
    assert graphs.captures == 3 and graphs.evictions == 1
    assert _get(graphs, "a")[1] is a[1]
    _get(graphs, "b")  # b comes back as a new capture, evicting c
    assert graphs.captures == 4 and graphs.evictions == 2


def test_a_failed_capture_turns_capture_off(caplog):
    graphs = StepGraphs("test", max_captures=2, capture=FakeCapture(fail=True))
    with caplog.at_level("WARNING", logger="oasr.engine"):
        assert _get(graphs, "a") is None
    assert not graphs.enabled and "runs eager" in caplog.text
    assert _get(graphs, "b") is None and graphs.captures == 0


def test_bad_limit_and_frame_capacities():
    with pytest.raises(ValueError, match="max_captures"):
        StepGraphs("test", max_captures=0)
    assert [frame_capacity(n) for n in (1, 64, 65, 128, 129, 1000)] == [64, 64, 128, 128, 256,
                                                                       1024]
