"""The attention decoders used for rescoring: WeNet's ``TransformerDecoder`` (left-to-right) and
U2++'s ``BiTransformerDecoder`` (a left-to-right and a right-to-left one side by side).

Rescoring is teacher-forced: whole hypotheses go through at once, so the decoder has no KV
cache. Self-attention is causal, so the padding after a shorter hypothesis never reaches its
tokens; cross-attention masks the encoder frames past each row's length.

Names follow WeNet's keys: ``embed.0`` (token table; ``embed.1`` is the sinusoid, not a
weight), ``decoders.N.{self_attn, src_attn, feed_forward, norm1, norm2, norm3}``,
``after_norm``, ``output_layer``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers.embedding import Embedding
from oasr.layers.ffn import FeedForward
from oasr.layers.linear import Linear
from oasr.layers.norm import LayerNorm
from oasr.models.conformer.attention import MultiHeadedAttention
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.subsampling import SinusoidalPositions

__all__ = ["BiTransformerDecoder", "DecoderLayer", "TransformerDecoder"]


class DecoderLayer(nn.Module):
    """Pre-norm: causal self-attention, cross-attention, feed-forward. (N, L, C)."""

    def __init__(self, d_model: int, heads: int, hidden: int, activation: str,
                 eps: float) -> None:
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, causal=True)
        self.src_attn = MultiHeadedAttention(heads, d_model)
        self.feed_forward = FeedForward(d_model, hidden, activation)
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.norm3 = LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor, mem_k: torch.Tensor, mem_v: torch.Tensor,
                mem_lens: torch.Tensor) -> torch.Tensor:
        """x: (N, L, C); mem_k, mem_v: (N, H, S, D); mem_lens: (N,) -> (N, L, C)."""
        h = self.norm1(x)
        k, v = self.self_attn.project_kv(h)
        x = x + self.self_attn.attend(h, k, v)
        x = x + self.src_attn.attend(self.norm2(x), mem_k, mem_v, kv_lens=mem_lens)
        return x + self.feed_forward(self.norm3(x))


class TransformerDecoder(nn.Module):
    """Tokens (N, L) over encoder memory -> logits (N, L, V)."""

    def __init__(self, cfg: ConformerConfig, layers: int) -> None:
        super().__init__()
        d = cfg.d_model
        self.embed = nn.ModuleList([Embedding(cfg.vocab_size, d),
                                    SinusoidalPositions(d, cfg.max_positions)])
        self.decoders = nn.ModuleList(
            DecoderLayer(d, cfg.decoder_heads, cfg.decoder_linear_units, cfg.decoder_activation,
                         cfg.norm_eps)
            for _ in range(layers)
        )
        self.after_norm = LayerNorm(d, eps=cfg.norm_eps)
        self.output_layer = Linear(d, cfg.vocab_size)
        self.xscale = math.sqrt(d)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_lens: torch.Tensor,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """Args:
            tokens: (N, L) int64, each starting with sos.
            memory: (B, S, C) encoder output; memory_lens: (B,) valid frames.
            rows: (N,) int64, the memory row of each token row (``None``: row i for i).

        Returns:
            logits (N, L, V).
        """
        table, positions = self.embed[0], self.embed[1]
        x = table(tokens) * self.xscale + positions(tokens.shape[1]).to(memory.dtype)
        lens = memory_lens if rows is None else memory_lens[rows]
        for layer in self.decoders:
            # Project the memory once per utterance, then give each hypothesis its row.
            k, v = layer.src_attn.project_kv(memory)
            if rows is not None:
                k, v = k.index_select(0, rows), v.index_select(0, rows)
            x = layer(x, k, v, lens)
        return self.output_layer(self.after_norm(x))


class BiTransformerDecoder(nn.Module):
    """U2++: ``left_decoder`` reads hypotheses forwards, ``right_decoder`` reversed."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.left_decoder = TransformerDecoder(cfg, cfg.decoder_layers)
        self.right_decoder = TransformerDecoder(cfg, cfg.r_decoder_layers)
