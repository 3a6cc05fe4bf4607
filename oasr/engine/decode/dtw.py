"""Batched DTW for word timings: where each ragged cost matrix's monotone path reaches each row.

``dtw_starts(cost, rows, frames)`` takes a padded (B, N, M) block (matrix b its top-left
(rows[b], frames[b]) corner) and returns (B, N) int32 on the host: the frame where the path
first reaches each token row, -1 past rows[b]. Routed (op ``dtw_starts``): a CUDA block runs the
``dtw_cuda`` kernel, one launch for the batch and one copy back; a CPU block, or a CUDA block
the kernel cannot serve (its counted gap), runs the C++ DTW (``oasr._C.alignment.dtw_starts``,
the recursion stated in oasr/csrc/host/alignment/dtw.h) over the rows.

``forward_native`` is the torch statement of the same path, vectorised over the batch and the
grid's anti-diagonals as the kernel is: the oracle both are tested against.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from oasr import ops
from oasr.native import native

__all__ = ["dtw_starts", "forward_native"]

_ROUTE = ops.route("dtw_starts", "dtw-rows", scope=ops.CUDA, provider="oasr.kernels.dtw_cuda")


def dtw_starts(cost: torch.Tensor, rows: Sequence[int], frames: Sequence[int]) -> np.ndarray:
    kernel = _ROUTE.select(cost)
    if kernel is not None:
        return kernel(cost, rows, frames).cpu().numpy()
    host = cost.detach().to("cpu", torch.float32).numpy()
    return native("alignment").dtw_starts(host, np.asarray(rows, dtype=np.int64),
                                          np.asarray(frames, dtype=np.int64))


def forward_native(cost: torch.Tensor, rows: Sequence[int], frames: Sequence[int]
                   ) -> torch.Tensor:
    """The torch oracle of ``dtw_starts`` (on ``cost``'s device; (B, N) int32).

    The grid is (n + 1) x (m + 1): acc(0, 0) = 0, the rest of its first row and column +inf,
    acc(i, j) = cost(i-1, j-1) + the strict minimum of acc(i-1, j-1), acc(i-1, j), acc(i, j-1)
    in that order of preference, any tie going to acc(i, j-1). Diagonal d = i + j depends only
    on d - 1 and d - 2, so each step computes one diagonal of every matrix at once.
    """
    B, N, M = cost.shape
    dev = cost.device
    cost = cost.to(torch.float32)
    n = torch.as_tensor(list(rows), dtype=torch.long, device=dev).reshape(B)
    m = torch.as_tensor(list(frames), dtype=torch.long, device=dev).reshape(B)
    inf = torch.tensor(float("inf"), device=dev)
    i = torch.arange(N + 1, device=dev)[None, :].expand(B, N + 1)
    batch = torch.arange(B, device=dev)[:, None].expand(B, N + 1)
    two_back = torch.full((B, N + 1), float("inf"), device=dev)
    one_back = torch.full((B, N + 1), float("inf"), device=dev)
    move = torch.zeros(B, N + 1, M + 1, dtype=torch.uint8, device=dev)
    steps = (n + m).max().item() if B else -1
    for d in range(steps + 1):
        j = d - i
        on = (j >= 0) & (j <= m[:, None]) & (i <= n[:, None])
        inner = on & (i > 0) & (j > 0)
        diag = torch.cat([two_back.new_full((B, 1), float("inf")), two_back[:, :-1]], dim=1)
        up = torch.cat([one_back.new_full((B, 1), float("inf")), one_back[:, :-1]], dim=1)
        left = one_back
        take_diag = (diag < up) & (diag < left)
        take_up = ~take_diag & (up < diag) & (up < left)
        best = torch.where(take_diag, diag, torch.where(take_up, up, left))
        step = torch.where(take_diag, 0, torch.where(take_up, 1, 2)).to(torch.uint8)
        c = cost[batch, (i - 1).clamp(0, N - 1), (j - 1).clamp(0, M - 1)]
        border = torch.where(i + j == 0, torch.zeros_like(best), inf)
        here = torch.where(inner, c + best, border)
        here = torch.where(on, here, inf)
        jc = j.clamp(0, M)
        move[batch[inner], i[inner], jc[inner]] = step[inner]
        two_back, one_back = one_back, here
    # The walk back, every matrix at once; a matrix stops at (0, 0).
    starts = torch.full((B, N), -1, dtype=torch.int32, device=dev)
    ci, cj = n.clone(), m.clone()
    rows_b = torch.arange(B, device=dev)
    for _ in range(steps):
        live = (ci > 0) | (cj > 0)
        if not bool(live.any()):
            break
        mark = live & (ci > 0)
        starts[rows_b[mark], ci[mark] - 1] = (cj[mark] - 1).to(torch.int32)
        step = move[rows_b, ci, cj].long()
        step = torch.where(ci == 0, 2, torch.where(cj == 0, 1, step))
        ci = torch.where(live & (step != 2), ci - 1, ci)
        cj = torch.where(live & (step != 1), cj - 1, cj)
    return starts
