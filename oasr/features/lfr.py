"""Low frame rate (LFR) stacking: FunASR's ``apply_lfr``, batched, over any extractor's output.

A Paraformer-style encoder reads ``lfr_m`` consecutive feature frames stacked into one, every
``lfr_n`` frames. Output frame ``i`` of a row of ``T`` frames is

    concat(x[clamp(i * lfr_n + j - (lfr_m - 1) // 2, 0, T - 1)] for j in range(lfr_m))

for ``i < ceil(T / lfr_n)``: the row is left-padded by repeating its first frame
``(lfr_m - 1) // 2`` times and right-padded by repeating its last valid frame (not the batch's
zero padding), which is FunASR's ``apply_lfr`` (``funasr/frontends/wav_frontend.py``) per row.
It is not part of an extractor: the engine applies it to whatever the frontend produced, so
every frontend gets it from ``FeatureConfig.lfr_m`` / ``lfr_n``.
"""

from __future__ import annotations

import torch

__all__ = ["apply_lfr_batch", "lfr_lengths"]


def lfr_lengths(lengths: torch.Tensor, lfr_n: int) -> torch.Tensor:
    """Stacked frames per row: ``ceil(lengths / lfr_n)``. (B,) int64 -> (B,) int64."""
    return torch.div(lengths + (lfr_n - 1), lfr_n, rounding_mode="floor")


def apply_lfr_batch(feats: torch.Tensor, lengths: torch.Tensor, lfr_m: int, lfr_n: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``lfr_m`` frames every ``lfr_n``, per row.

    Args:
        feats: (B, T, F) features; frames at or past a row's length are padding.
        lengths: (B,) valid frames per row.
        lfr_m: frames stacked into one (>= 1).
        lfr_n: hop between stacked frames (>= 1).

    Returns:
        (B, T', lfr_m * F) with ``T' = ceil(max(lengths) / lfr_n)`` (0 for an empty batch), and
        the per-row lengths ``ceil(lengths / lfr_n)``. Frames past a row's length hold no
        meaning. ``lfr_m == lfr_n == 1`` returns the inputs unchanged.
    """
    if lfr_m < 1 or lfr_n < 1:
        raise ValueError(f"lfr_m and lfr_n must be >= 1, got lfr_m={lfr_m}, lfr_n={lfr_n}")
    if feats.dim() != 3 or lengths.shape != feats.shape[:1]:
        raise ValueError(f"expected feats (B, T, F) and lengths (B,), got "
                         f"{tuple(feats.shape)} and {tuple(lengths.shape)}")
    if lfr_m == 1 and lfr_n == 1:
        return feats, lengths
    b, _, f = feats.shape
    lengths = lengths.to(device=feats.device, dtype=torch.int64)
    out_lens = lfr_lengths(lengths, lfr_n)
    t_out = int(out_lens.max()) if b else 0
    left = (lfr_m - 1) // 2
    start = torch.arange(t_out, device=feats.device) * lfr_n - left  # (T',)
    src = start[:, None] + torch.arange(lfr_m, device=feats.device)  # (T', m)
    last = (lengths - 1).clamp(min=0)  # (B,)
    src = torch.minimum(src[None].clamp(min=0), last[:, None, None])  # (B, T', m)
    rows = torch.arange(b, device=feats.device)[:, None, None]
    stacked = feats[rows, src]  # (B, T', m, F)
    return stacked.reshape(b, t_out, lfr_m * f), out_lens
