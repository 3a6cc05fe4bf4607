"""``ASREngine.run``: the one admission loop, over a list or over a source that may wait."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.engine.request import Request
from tests.transcribe.conftest import build_tiny_engine


@pytest.fixture(scope="module")
def engine():
    return build_tiny_engine(window_s=2.0)


def _req(i: int, n: int = 8000) -> Request:
    return Request(f"r{i}", np.full(n, 0.1, np.float32), metadata={"i": i})


def test_a_source_that_waits_gets_its_next_request_in_after_an_output(engine) -> None:
    """Each request is made only once the one before it finished (a long recording's windows)."""
    finished: list[str] = []

    def chain():
        for i in range(3):
            yield _req(i)
            while len(finished) <= i:
                yield None  # the next depends on this one's output
    for out in engine.run(chain()):
        assert out.error is None
        finished.append(out.request_id)
    assert finished == ["r0", "r1", "r2"]


def test_a_source_waiting_on_nothing_is_an_error_not_a_hang(engine) -> None:
    def stuck():
        yield None

    with pytest.raises(RuntimeError, match="no request is being decoded"):
        list(engine.run(stuck()))


def test_a_refused_request_comes_back_as_an_error_output(engine) -> None:
    outs = list(engine.run([_req(0), Request("empty", np.zeros(0, np.float32)), _req(1)]))
    by_id = {o.request_id: o for o in outs}
    assert set(by_id) == {"r0", "r1", "empty"}
    assert by_id["empty"].error and by_id["r0"].error is None
