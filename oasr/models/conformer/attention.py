"""The Conformer's attentions: relative-position self-attention (encoder) and plain multi-head
attention (decoder self and cross).

Projection names are WeNet's (``linear_q``, ``linear_k``, ``linear_v``, ``linear_out``,
``linear_pos``, ``pos_bias_u``, ``pos_bias_v``). The relative-position form is Transformer-XL's
with WeNet's simplification (no rel-shift): the score of query i and key j is
``((q_i + u) . k_j + (q_i + v) . p_j) / sqrt(d_k)`` with ``p_j`` the projected sinusoid of
position j. It builds its own scores, so its softmax is the waist's ``masked_softmax`` with the
position term as the additive bias; the decoder's attentions are the waist's ``Attention``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from oasr.layers.attention import Attention
from oasr.layers.linear import Linear
from oasr.layers.matmul import bmm
from oasr.layers.softmax import MaskedSoftmax

if TYPE_CHECKING:
    from oasr.cache.paged_stream import ChunkKv

__all__ = ["MultiHeadedAttention", "RelPositionMultiHeadedAttention"]


class _Projections(nn.Module):
    """The four projections every WeNet attention has."""

    def __init__(self, heads: int, d_model: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.linear_q = Linear(d_model, d_model)
        self.linear_k = Linear(d_model, d_model)
        self.linear_v = Linear(d_model, d_model)
        self.linear_out = Linear(d_model, d_model)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, H, T, D)."""
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> linear_out over (B, T, C)."""
        b, _, t, _ = x.shape
        return self.linear_out(x.transpose(1, 2).reshape(b, t, -1))


class RelPositionMultiHeadedAttention(_Projections):
    """Encoder self-attention with relative-position biases.

    ``pos_bias_u`` / ``pos_bias_v`` (H, D) are the content and position biases added to the
    query before it meets the keys and the positions respectively.
    """

    def __init__(self, heads: int, d_model: int) -> None:
        super().__init__(heads, d_model)
        self.linear_pos = Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.softmax = MaskedSoftmax(dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        key_mask: torch.Tensor | None = None,
        chunk_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Args:
            x: (B, T, C) normed input (queries, keys and values).
            pos: (T, C) sinusoid of positions 0 .. T-1.
            key_mask: (B, 1, 1, T) bool, True = a valid key.
            chunk_mask: (1, 1, T, T) bool, True = query i may see key j (chunk attention).

        Returns:
            (B, T, C).
        """
        b, t, _ = x.shape
        h, d = self.heads, self.head_dim
        q = self.linear_q(x).view(b, t, h, d)
        k = self.split(self.linear_k(x))  # (B, H, T, D)
        v = self.split(self.linear_v(x))
        p = self.linear_pos(pos).view(t, h, d).transpose(0, 1)  # (H, T, D), shared by rows
        scale = 1.0 / math.sqrt(d)
        q_u = (q + self.pos_bias_u).transpose(1, 2).reshape(b * h, t, d)
        content = bmm(q_u, k.reshape(b * h, t, d).transpose(1, 2)).view(b, h, t, t)
        # The position term per head: every row's queries against one (T, D) table.
        q_v = (q + self.pos_bias_v).permute(2, 0, 1, 3).reshape(h, b * t, d)
        position = bmm(q_v, p.transpose(1, 2)).view(h, b, t, t).transpose(0, 1)
        probs = self.softmax(content * scale, position * scale, key_mask, chunk_mask)
        out = bmm(probs.reshape(b * h, t, t), v.reshape(b * h, t, d)).view(b, h, t, d)
        return self.merge(out)

    def forward_paged(self, x: torch.Tensor, layer: int, kv: ChunkKv,
                      key_pos: torch.Tensor) -> torch.Tensor:
        """One chunk against the stream's paged keys (WeNet's ``forward_chunk``).

        Args:
            x: (B, t, C) normed chunk; its K/V are written to ``kv`` first, so the chunk's
                queries see the left window and the whole chunk.
            layer: this block's index in the pool.
            kv: the cohort's ``oasr.cache.paged_stream.ChunkKv``.
            key_pos: (B, S, C) the sinusoid at every key slot's absolute frame.

        Returns:
            (B, t, C).
        """
        b, t, _ = x.shape
        h, d = self.heads, self.head_dim
        q = self.linear_q(x).view(b, t, h, d)
        kv.write(layer, self.split(self.linear_k(x)), self.split(self.linear_v(x)))
        k, v = kv.keys(layer)  # (B, H, S, D)
        s = k.shape[2]
        p = self.linear_pos(key_pos).view(b, s, h, d).transpose(1, 2)  # (B, H, S, D)
        scale = 1.0 / math.sqrt(d)
        q_u = (q + self.pos_bias_u).transpose(1, 2).reshape(b * h, t, d)
        q_v = (q + self.pos_bias_v).transpose(1, 2).reshape(b * h, t, d)
        content = bmm(q_u, k.reshape(b * h, s, d).transpose(1, 2)).view(b, h, t, s)
        position = bmm(q_v, p.reshape(b * h, s, d).transpose(1, 2)).view(b, h, t, s)
        probs = self.softmax(content * scale, position * scale, kv.key_mask(), None)
        out = bmm(probs.reshape(b * h, t, s), v.reshape(b * h, s, d)).view(b, h, t, d)
        return self.merge(out)


class MultiHeadedAttention(_Projections):
    """Decoder attention; ``causal`` for self-attention over teacher-forced tokens."""

    def __init__(self, heads: int, d_model: int, causal: bool = False) -> None:
        super().__init__(heads, d_model)
        self.attn = Attention(heads, self.head_dim, causal=causal)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, C) -> keys, values (B, H, S, D)."""
        return self.split(self.linear_k(memory)), self.split(self.linear_v(memory))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               kv_lens: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, L, C) queries; k, v: (B, H, S, D); kv_lens: (B,) valid keys -> (B, L, C)."""
        return self.merge(self.attn(self.split(self.linear_q(x)), k, v, kv_lens=kv_lens))
