"""Batched DTW (``oasr.engine.decode.dtw``): the torch statement, the host batch and the per-row
C++ path agree exactly on ragged batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.engine.decode import dtw
from oasr.native import native

# (rows, frames) per matrix: length-1 rows and columns, more tokens than frames, square.
RAGGED = [
    ([1, 7, 40, 3, 1, 12], [1, 90, 25, 2, 9, 12]),
    ([9, 30, 2, 1], [3, 1, 2, 1]),
    ([1], [1]),
    ([5, 5], [60, 1]),
]


def per_row_starts(cost: torch.Tensor, rows: list[int], frames: list[int]) -> np.ndarray:
    """Starts read from ``oasr._C.alignment.dtw``'s path, one matrix at a time, the way the
    word pass reads them (the first path point on each token row)."""
    out = np.full(cost.shape[:2], -1, dtype=np.int32)
    for b, (n, m) in enumerate(zip(rows, frames)):
        token_idx, frame_idx = native("alignment").dtw(
            np.ascontiguousarray(cost[b, :n, :m].numpy()))
        first = np.diff(token_idx, prepend=-1).astype(bool)
        assert (token_idx[first] == np.arange(n)).all()  # every row is reached, in order
        out[b, :n] = frame_idx[first]
    return out


def random_cost(rows: list[int], frames: list[int], seed: int, ties: bool) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    shape = (len(rows), max(rows), max(frames))
    if ties:  # integer costs: equal candidates everywhere, so the tie rules decide the path
        return torch.tensor(rng.integers(0, 3, shape).astype(np.float32))
    return torch.tensor(rng.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("case", range(len(RAGGED)))
def test_batch_equals_per_row_and_the_torch_statement(case: int, ties: bool) -> None:
    rows, frames = RAGGED[case]
    cost = random_cost(rows, frames, seed=case, ties=ties)
    # What lies outside each matrix's corner must not matter.
    cost_noisy = cost.clone()
    for b, (n, m) in enumerate(zip(rows, frames)):
        cost_noisy[b, n:, :] = -1e6
        cost_noisy[b, :, m:] = -1e6
    expected = per_row_starts(cost, rows, frames)
    for c in (cost, cost_noisy):
        host = dtw.dtw_starts(c, rows, frames)
        assert host.dtype == np.int32 and host.shape == cost.shape[:2]
        np.testing.assert_array_equal(host, expected)
        np.testing.assert_array_equal(dtw.forward_native(c, rows, frames).numpy(), expected)
    for b, n in enumerate(rows):
        assert (expected[b, n:] == -1).all()
        assert expected[b, 0] == 0 and (np.diff(expected[b, :n]) >= 0).all()


def test_a_monotone_diagonal_is_followed() -> None:
    """A cheap band along the diagonal of a 4 x 8 matrix: each row starts at 2 i."""
    cost = torch.ones(1, 4, 8)
    for i in range(4):
        cost[0, i, 2 * i:2 * i + 2] = -1.0
    np.testing.assert_array_equal(dtw.dtw_starts(cost, [4], [8])[0], [0, 2, 4, 6])
    np.testing.assert_array_equal(dtw.forward_native(cost, [4], [8])[0].numpy(), [0, 2, 4, 6])


def test_lengths_outside_the_block_are_refused() -> None:
    cost = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="outside"):
        dtw.dtw_starts(cost, [3, 4], [4, 4])
    with pytest.raises(ValueError, match="outside"):
        dtw.dtw_starts(cost, [3, 0], [4, 4])
