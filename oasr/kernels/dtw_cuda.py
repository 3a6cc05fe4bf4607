"""``dtw_starts``: batched DTW over ragged cost matrices on the GPU, one launch per batch.

Serves op ``dtw_starts`` (routed by ``oasr.engine.decode.dtw``) for CUDA fp32 cost blocks of at
most ``MAX_ROWS`` token rows. The kernel (``oasr/csrc/kernels/alignment/dtw.cuh``) gives each
matrix one thread block that sweeps the anti-diagonals of the accumulated-cost grid and walks
the path back, writing where it first reaches each token row. Its oracle is
``oasr.engine.decode.dtw.forward_native`` (and, through it, ``oasr._C.alignment.dtw``): the
recursion is the same fp32 arithmetic cell for cell, so the outputs are equal.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.kernels.declarations import DTW_ROWS, MAX_ROWS
from oasr.ops.build import DTW_CUDA

__all__ = ["DTW_ROWS", "MAX_ROWS", "dtw_starts", "supports"]



@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = jit.load(DTW_CUDA)
    if lib.oasr_dtw_max_rows() != MAX_ROWS:
        raise RuntimeError(f"libdtw_cuda was built for {lib.oasr_dtw_max_rows()} rows, the "
                           f"binding expects {MAX_ROWS}")
    return lib


def supports(cost: torch.Tensor, *rest: object) -> bool:
    return cost.is_cuda and cost.dim() == 3 and 1 <= cost.shape[1] <= MAX_ROWS


def dtw_starts(cost: torch.Tensor, rows: Sequence[int], frames: Sequence[int]) -> torch.Tensor:
    """cost (B, N, M) on CUDA, matrix b its top-left (rows[b], frames[b]) corner -> (B, N)
    int32 on the device: the frame where each matrix's DTW path first reaches each token row,
    -1 past rows[b]. One launch; nothing is read back."""
    if cost.dim() != 3:
        raise ValueError(f"cost must be (batch, tokens, frames), got {tuple(cost.shape)}")
    B, N, M = cost.shape
    n = np.asarray(rows, dtype=np.int64)
    m = np.asarray(frames, dtype=np.int64)
    if n.shape != (B,) or m.shape != (B,):
        raise ValueError(f"rows and frames must each have {B} entries")
    if B and ((n < 1).any() or (n > N).any() or (m < 1).any() or (m > M).any()):
        raise ValueError(f"every row's lengths must lie in [1, {N}] x [1, {M}]; got rows "
                         f"{n.tolist()}, frames {m.tolist()}")
    if N > MAX_ROWS:
        raise ValueError(f"dtw_cuda serves at most {MAX_ROWS} token rows, got {N}")
    dev = cost.device
    starts = torch.empty(B, N, dtype=torch.int32, device=dev)
    if B == 0:
        return starts
    cost = cost.to(torch.float32).contiguous()
    lens = torch.from_numpy(np.concatenate([n, m])).to(dev)
    move = torch.empty(B * (N + 1) * (M + 1), dtype=torch.uint8, device=dev)
    lib = _library()
    check(lib, lib.oasr_dtw_starts(ptr(cost), ptr(lens), ctypes.c_void_p(lens.data_ptr() + 8 * B),
                                   ptr(move), ptr(starts), B, N, M, stream_handle(dev)),
          "dtw_starts")
    return starts

