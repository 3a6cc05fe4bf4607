"""``dtw_starts`` on the GPU (``dtw_cuda``): the kernel against the torch statement
(``oasr.engine.decode.dtw.forward_native``) on random ragged batches, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr import ops
from oasr.engine.decode import dtw
from oasr.kernels import dtw_cuda

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_registered_for_the_dtw_op() -> None:
    impl = ops.registered_kernels()["dtw_starts"].load()
    assert impl.fn is dtw_cuda.dtw_starts and impl.library.name == "dtw_cuda"
    assert not dtw_cuda.supports(torch.zeros(2, 3, 4))  # CPU
    assert "dtw-rows" in ops.KERNEL_GAPS


def ragged(seed: int, batch: int, max_rows: int, max_frames: int, ties: bool):
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, max_rows + 1, batch).tolist()
    frames = rng.integers(1, max_frames + 1, batch).tolist()
    rows[0], frames[0] = 1, 1  # a 1 x 1 matrix
    rows[1], frames[1] = max_rows, 1  # one frame, many tokens
    rows[2], frames[2] = 1, max_frames  # one token
    rows[3], frames[3] = max_rows, max(1, max_rows // 3)  # more tokens than frames
    shape = (batch, max(rows), max(frames))
    cost = (rng.integers(0, 3, shape) if ties else rng.standard_normal(shape)).astype(np.float32)
    return torch.tensor(cost), rows, frames


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape", [(8, 5, 9), (64, 120, 1500), (5, 600, 200), (3, 1, 1)])
def test_kernel_equals_forward_native(shape: tuple[int, int, int], ties: bool) -> None:
    batch, max_rows, max_frames = shape
    batch = max(batch, 4)
    cost, rows, frames = ragged(sum(shape) + ties, batch, max_rows, max_frames, ties)
    oracle = dtw.forward_native(cost, rows, frames).numpy()
    out = dtw_cuda.dtw_starts(cost.cuda(), rows, frames)
    assert out.is_cuda and out.dtype == torch.int32
    np.testing.assert_array_equal(out.cpu().numpy(), oracle)
    # The routed call on a CUDA block is the kernel, read back once.
    np.testing.assert_array_equal(dtw.dtw_starts(cost.cuda(), rows, frames), oracle)


@pytest.mark.gpu
@needs_cuda
def test_kernel_refuses_bad_lengths_and_serves_an_empty_batch() -> None:
    cost = torch.zeros(2, 3, 4, device="cuda")
    with pytest.raises(ValueError, match="lie in"):
        dtw_cuda.dtw_starts(cost, [3, 4], [4, 4])
    assert dtw_cuda.dtw_starts(torch.zeros(0, 3, 4, device="cuda"), [], []).shape == (0, 3)
