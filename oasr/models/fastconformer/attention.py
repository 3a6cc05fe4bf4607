"""FastConformer's relative-position self-attention (Transformer-XL's, with the rel-shift).

The score of query i and key j is ``((q_i + u) . k_j + (q_i + v) . r_{i-j}) / sqrt(d)`` where
``r_m = W_pos pe(m)`` projects the sinusoid of the signed distance ``m`` (positions ``T-1``
down to ``-(T-1)``, sin and cos interleaved per frequency). Unlike WeNet's Conformer (absolute
positions, no shift) the position term depends on ``i - j``; it is computed once against the
``2T - 1`` distances and gathered into (T, T).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers.linear import Linear
from oasr.layers.matmul import bmm
from oasr.layers.softmax import MaskedSoftmax

__all__ = ["RelPositionAttention", "relative_sinusoids"]


def relative_sinusoids(frames: int, dim: int, device: torch.device, dtype: torch.dtype
                       ) -> torch.Tensor:
    """(2T - 1, dim): row k encodes distance ``T - 1 - k``; columns (sin, cos) per frequency."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32)
                                  / dim))
    dist = torch.arange(frames - 1, -frames, -1, device=device, dtype=torch.float32)
    angles = dist[:, None] * inv_freq[None, :]
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(2 * frames - 1, dim).to(dtype)


class RelPositionAttention(nn.Module):
    """``linear_q/k/v/out``, ``linear_pos`` (no bias), ``pos_bias_u/v`` (H, D)."""

    def __init__(self, d_model: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.linear_q = Linear(d_model, d_model, bias=bias)
        self.linear_k = Linear(d_model, d_model, bias=bias)
        self.linear_v = Linear(d_model, d_model, bias=bias)
        self.linear_out = Linear(d_model, d_model, bias=bias)
        self.linear_pos = Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.softmax = MaskedSoftmax(dim=-1)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor | None
                ) -> torch.Tensor:
        """x (B, T, C) normed; pos (2T - 1, C) from ``relative_sinusoids``; key_mask
        (B, 1, 1, T) bool, True = a valid key -> (B, T, C)."""
        b, t, c = x.shape
        h, d = self.heads, self.head_dim
        q = self.linear_q(x).view(b, t, h, d)
        k = self.linear_k(x).view(b, t, h, d).transpose(1, 2).reshape(b * h, t, d)
        v = self.linear_v(x).view(b, t, h, d).transpose(1, 2).reshape(b * h, t, d)
        p = self.linear_pos(pos).view(2 * t - 1, h, d).transpose(0, 1)  # (H, 2T-1, D)
        scale = 1.0 / math.sqrt(d)
        q_u = (q + self.pos_bias_u).transpose(1, 2).reshape(b * h, t, d)
        content = bmm(q_u, k.transpose(1, 2)).view(b, h, t, t)
        q_v = (q + self.pos_bias_v).permute(2, 0, 1, 3).reshape(h, b * t, d)
        by_distance = bmm(q_v, p.transpose(1, 2)).view(h, b, t, 2 * t - 1).transpose(0, 1)
        # query i, key j reads distance i - j, stored at column T - 1 - i + j
        idx = torch.arange(t, device=x.device)
        cols = (t - 1 - idx[:, None] + idx[None, :]).expand(b, h, t, t)
        position = by_distance.gather(-1, cols)
        probs = self.softmax(content * scale, position * scale, key_mask)
        out = bmm(probs.reshape(b * h, t, t), v).view(b, h, t, d)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, c))
