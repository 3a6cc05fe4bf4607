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
import torch.nn.functional as F
from torch import nn

from oasr.layers.linear import Linear
from oasr.layers.matmul import bmm
from oasr.layers.softmax import MaskedSoftmax

__all__ = ["RelPositionAttention", "relative_bias", "relative_sinusoids"]


def relative_sinusoids(frames: int, dim: int, device: torch.device, dtype: torch.dtype
                       ) -> torch.Tensor:
    """(2T - 1, dim): row k encodes distance ``T - 1 - k``; columns (sin, cos) per frequency."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32)
                                  / dim))
    dist = torch.arange(frames - 1, -frames, -1, device=device, dtype=torch.float32)
    angles = dist[:, None] * inv_freq[None, :]
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(2 * frames - 1, dim).to(dtype)


# Every stride of an SDPA mask but the last a multiple of this many elements (64 bytes of fp32,
# 32 of bf16): torch pads a copy of a mask whose strides are not aligned before the
# memory-efficient kernel reads it.
_MASK_ALIGN = 16


def relative_bias(q_v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(B, H, T, T) position scores ``q_v[b, i, h] . p[T - 1 - i + j, h]`` as a strided view
    of the distance scores: row i of the view starts one column earlier in its distance row
    than row i - 1, so the shift is a stride, not a gather. q_v (B, T, H, D) (scaled as wanted);
    p (2T - 1, H, D), row k the distance ``T - 1 - k``. The view owns its elements (no two
    share memory), so it may be written in place. Zero rows padded into both operands put
    every row, head and batch entry of the view on a ``_MASK_ALIGN`` boundary."""
    b, t, h, d = q_v.shape
    rows = t + -t % _MASK_ALIGN
    lead = -(t - 1) % _MASK_ALIGN  # so the first row starts aligned
    width = lead + 2 * t - 1
    width += -(width - 1) % _MASK_ALIGN  # row stride width - 1, aligned
    queries = q_v.new_zeros(h, b, rows, d)
    queries[:, :, :t] = q_v.permute(2, 0, 1, 3)
    dists = p.new_zeros(width, h, d)
    dists[lead:lead + 2 * t - 1] = p
    scores = bmm(queries.view(h, b * rows, d), dists.permute(1, 2, 0))  # (H, B*rows, width)
    return scores.as_strided((b, h, t, t), (rows * width, b * rows * width, width - 1, 1),
                             scores.storage_offset() + lead + t - 1)


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
        if x.is_cuda:
            return self.forward_fused(x, pos, key_mask)
        return self.forward_native(x, pos, key_mask)

    def forward_fused(self, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor | None
                      ) -> torch.Tensor:
        """The same attention through SDPA: the position term is the additive mask, read in
        place from the distance scores (``relative_bias``, no gather), and neither the content
        scores nor the probabilities are materialised: about half the (B, H, T, T) passes of
        ``forward_native``."""
        b, t, c = x.shape
        h, d = self.heads, self.head_dim
        scale = 1.0 / math.sqrt(d)
        q = self.linear_q(x).view(b, t, h, d)
        k = self.linear_k(x).view(b, t, h, d).transpose(1, 2)
        v = self.linear_v(x).view(b, t, h, d).transpose(1, 2)
        q_u = (q + self.pos_bias_u).transpose(1, 2)
        bias = relative_bias((q + self.pos_bias_v) * scale,
                             self.linear_pos(pos).view(2 * t - 1, h, d))
        if key_mask is not None:
            bias.masked_fill_(~key_mask, float("-inf"))
        out = F.scaled_dot_product_attention(q_u, k, v, attn_mask=bias, scale=scale)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, c))

    def forward_native(self, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor | None
                       ) -> torch.Tensor:
        """The explicit form: content and position scores, a masked softmax, the product."""
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
