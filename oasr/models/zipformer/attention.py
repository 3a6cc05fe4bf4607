"""Zipformer2's attention: compact relative positions, one set of weights shared by two value
paths (``SelfAttention``) and the gated ``NonlinAttention``.

Layout is icefall's (T, B, C) inside the stacks. The weights are computed once per layer
(query/key/position-query from one projection) and reused by ``self_attn1``, ``self_attn2``
and (head 0 only) ``nonlin_attention``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers.activation import Tanh
from oasr.layers.linear import Linear
from oasr.layers.matmul import bmm

MASKED = -1000.0  # icefall's fill for masked scores (not -inf: a fully masked row stays finite)


def compact_rel_positions(length: int, dim: int, device: torch.device,
                          dtype: torch.dtype, left: int = 0) -> torch.Tensor:
    """(1, left + 2T - 1, dim) encodings of relative positions -(left+T-1)..(T-1):
    atan-compressed log-distances, cos/sin at frequencies 1..dim/2, last channel a constant 1
    (a bias). ``left``: cached frames a streaming chunk also attends to."""
    x = torch.arange(-(left + length - 1), length, device=device).to(torch.float32).unsqueeze(1)
    freqs = 1 + torch.arange(dim // 2, device=device)
    compression = dim ** 0.5
    compressed = compression * x.sign() * ((x.abs() + compression).log()
                                          - math.log(compression))
    angle = (compressed / (dim / (2.0 * math.pi))).atan()
    pe = torch.zeros(x.shape[0], dim, device=device)
    pe[:, 0::2] = (angle * freqs).cos()
    pe[:, 1::2] = (angle * freqs).sin()
    pe[:, -1] = 1.0
    return pe.to(dtype).unsqueeze(0)


def matmul4(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(H, B, M, K) @ (H|1, B|1, K, N) -> (H, B, M, N) through the routed ``bmm``."""
    h, bsz, m, k = a.shape
    b = b.expand(h, bsz, k, b.shape[-1])
    return bmm(a.reshape(h * bsz, m, k), b.reshape(h * bsz, k, b.shape[-1])).reshape(
        h, bsz, m, -1)


def rel_shift(scores: torch.Tensor, length: int) -> torch.Tensor:
    """(H, B, T, N) scores over relative positions -> (H, B, T, length), out[i, j] =
    scores[i, T - 1 - i + j] (offline N = 2T - 1, length = T; streaming N = L + 2T - 1,
    length = L + T).

    A strided view, not a gather: row i starts T - 1 - i into its own row of N, so stepping
    one row down and one column left is a stride of N - 1. An index tensor of (H, B, T, length)
    int64 would be 8x the scores' own bytes in fp16."""
    scores = scores.contiguous()
    h, b, t, n = scores.shape
    if length > n - t + 1:  # the view would read past each row (a gather would have raised)
        raise ValueError(f"rel_shift of {t} rows to {length} columns needs at least "
                         f"{t + length - 1} relative positions, got {n}")
    sh, sb, _, _ = scores.stride()
    return scores.as_strided((h, b, t, length), (sh, sb, n - 1, 1),
                             scores.storage_offset() + t - 1)


class RelPositionAttentionWeights(nn.Module):
    """(T, B, C) -> attention weights (H, B, T, T): content q.k plus position-query . position
    encodings, masked, softmaxed."""

    def __init__(self, embed_dim: int, pos_dim: int, num_heads: int, query_head_dim: int,
                 pos_head_dim: int) -> None:
        super().__init__()
        self.num_heads, self.query_head_dim, self.pos_head_dim = (num_heads, query_head_dim,
                                                                  pos_head_dim)
        self.in_proj = Linear(embed_dim, (2 * query_head_dim + pos_head_dim) * num_heads)
        self.linear_pos = Linear(pos_dim, num_heads * pos_head_dim, bias=False)

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        t, b, _ = x.shape
        heads, qd, pd = self.num_heads, self.query_head_dim, self.pos_head_dim
        x = self.in_proj(x)
        q = x[..., :qd * heads].reshape(t, b, heads, qd).permute(2, 1, 0, 3)
        k = x[..., qd * heads:2 * qd * heads].reshape(t, b, heads, qd).permute(2, 1, 3, 0)
        p = x[..., 2 * qd * heads:].reshape(t, b, heads, pd).permute(2, 1, 0, 3)
        scores = matmul4(q, k)
        pos = self.linear_pos(pos_emb).reshape(-1, pos_emb.shape[1], heads, pd)
        pos_scores = matmul4(p, pos.permute(2, 0, 3, 1))  # (H, B, T, 2T' - 1)
        scores = scores + rel_shift(pos_scores, t)
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, MASKED)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.unsqueeze(1), MASKED)
        return scores.softmax(dim=-1)


    def streaming_forward(self, x: torch.Tensor, pos_emb: torch.Tensor,
                          cached_key: torch.Tensor, key_padding_mask: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk (T, B, C) against ``cached_key`` (L, B, H * qd) of the last L frames;
        ``pos_emb`` (1, L + 2T - 1, pos_dim), ``key_padding_mask`` (B, L + T). Returns the
        weights (H, B, T, L + T) and the new key cache."""
        t, b, _ = x.shape
        heads, qd, pd = self.num_heads, self.query_head_dim, self.pos_head_dim
        left = cached_key.shape[0]
        x = self.in_proj(x)
        q = x[..., :qd * heads].reshape(t, b, heads, qd).permute(2, 1, 0, 3)
        k = torch.cat([cached_key, x[..., qd * heads:2 * qd * heads]], dim=0)
        new_key = k[-left:]
        k = k.reshape(left + t, b, heads, qd).permute(2, 1, 3, 0)
        p = x[..., 2 * qd * heads:].reshape(t, b, heads, pd).permute(2, 1, 0, 3)
        scores = matmul4(q, k)
        pos = self.linear_pos(pos_emb).reshape(-1, pos_emb.shape[1], heads, pd)
        scores = scores + rel_shift(matmul4(p, pos.permute(2, 0, 3, 1)), left + t)
        scores = scores.masked_fill(key_padding_mask.unsqueeze(1), MASKED)
        return scores.softmax(dim=-1), new_key


class SelfAttention(nn.Module):
    """Values from ``in_proj``, mixed by precomputed weights, projected back."""

    def __init__(self, embed_dim: int, num_heads: int, value_head_dim: int) -> None:
        super().__init__()
        self.in_proj = Linear(embed_dim, num_heads * value_head_dim)
        self.out_proj = Linear(num_heads * value_head_dim, embed_dim)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        t, b, _ = x.shape
        heads = weights.shape[0]
        v = self.in_proj(x).reshape(t, b, heads, -1).permute(2, 1, 0, 3)
        y = matmul4(weights, v).permute(2, 1, 0, 3).reshape(t, b, -1)
        return self.out_proj(y)

    def streaming_forward(self, x: torch.Tensor, weights: torch.Tensor,
                          cached_val: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cached_val`` (L, B, H * vd): the last L frames' values."""
        t, b, _ = x.shape
        heads, left = weights.shape[0], cached_val.shape[0]
        v = torch.cat([cached_val, self.in_proj(x)], dim=0)
        new_val = v[-left:]
        v = v.reshape(left + t, b, heads, -1).permute(2, 1, 0, 3)
        y = matmul4(weights, v).permute(2, 1, 0, 3).reshape(t, b, -1)
        return self.out_proj(y), new_val


class NonlinAttention(nn.Module):
    """in_proj -> (s, x, y); tanh(s) gates x, the weights mix it, y gates the result."""

    def __init__(self, channels: int, hidden_channels: int) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        self.in_proj = Linear(channels, 3 * hidden_channels)
        self.tanh = Tanh()
        self.out_proj = Linear(hidden_channels, channels)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        t, b, _ = x.shape
        s, x, y = self.in_proj(x).chunk(3, dim=2)
        x = x * self.tanh(s)
        heads = weights.shape[0]
        x = x.reshape(t, b, heads, -1).permute(2, 1, 0, 3)
        x = matmul4(weights, x).permute(2, 1, 0, 3).reshape(t, b, -1)
        return self.out_proj(x * y)

    def streaming_forward(self, x: torch.Tensor, weights: torch.Tensor,
                          cached_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cached_x`` (1, B, L, hidden): the last L frames' gated inputs."""
        t, b, _ = x.shape
        s, x, y = self.in_proj(x).chunk(3, dim=2)
        x = (x * self.tanh(s)).reshape(t, b, 1, -1).permute(2, 1, 0, 3)
        left = cached_x.shape[2]
        x = torch.cat([cached_x, x], dim=2)
        new_x = x[:, :, -left:]
        x = matmul4(weights, x).permute(2, 1, 0, 3).reshape(t, b, -1)
        return self.out_proj(x * y), new_x
