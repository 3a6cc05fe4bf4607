"""The Paraformer NAR decoder (FunASR ``ParaformerSANMDecoder``): one pass over the CIF
acoustic embeddings, no token inputs.

Layers ``decoders`` (``decoder_att_layers``): ``x + fsmn(norm2(ffn(norm1(x))))`` then
``+ cross_attn(norm3(.), encoder)``; ``decoders2``: the same without cross-attention;
``decoders3``: ``ffn(norm1(x))`` with no residual. The FFN is ``w_2(norm(relu(w_1 x)))`` with
no bias on ``w_2``. Then ``after_norm`` and ``output_layer``. Module names are FunASR's keys.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers import ESPNET_EPS, Attention, DepthwiseConv1d, LayerNorm, Linear, LinearActivation
from oasr.models.paraformer.config import ParaformerConfig
from oasr.models.paraformer.encoder import fsmn_padding

__all__ = ["ParaformerDecoder"]


def _lengths_mask(lens: torch.Tensor, t: int) -> torch.Tensor:
    return torch.arange(t, device=lens.device)[None, :] < lens[:, None]


class DecoderFeedForward(nn.Module):
    """``PositionwiseFeedForwardDecoderSANM``: ``w_2(norm(relu(w_1(x))))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = LinearActivation(dim, hidden, "relu")
        self.norm = LayerNorm(hidden, eps=ESPNET_EPS)
        self.w_2 = Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.norm(self.w_1(x)))


class DecoderFsmn(nn.Module):
    """``MultiHeadedAttentionSANMDecoder``: ``(x + dwconv(x)) * mask`` on the masked x."""

    def __init__(self, dim: int, kernel_size: int, shift: int) -> None:
        super().__init__()
        self.fsmn_block = DepthwiseConv1d(dim, kernel_size,
                                          padding=fsmn_padding(kernel_size, shift), bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fsmn_block(x, mask, residual=x * mask.to(x.dtype)[..., None],
                               mask_output=True)


class CrossAttention(nn.Module):
    """``MultiHeadedAttentionCrossAtt``: queries (B, K, C) over memory (B, T, C)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.d_k = heads, dim // heads
        self.linear_q = Linear(dim, dim)
        self.linear_k_v = Linear(dim, 2 * dim)
        self.linear_out = Linear(dim, dim)
        self.attn = Attention(heads, self.d_k)

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                memory_lens: torch.Tensor) -> torch.Tensor:
        b, k_len, _ = x.shape

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.reshape(b, z.shape[1], self.heads, self.d_k).transpose(1, 2)

        k, v = self.linear_k_v(memory).chunk(2, dim=-1)
        ctx = self.attn(heads(self.linear_q(x)), heads(k), heads(v), kv_lens=memory_lens)
        return self.linear_out(ctx.transpose(1, 2).reshape(b, k_len, -1))


class DecoderLayer(nn.Module):
    """``DecoderLayerSANM`` with an FSMN self-memory, optionally cross-attention, or neither."""

    def __init__(self, cfg: ParaformerConfig, memory: bool, cross: bool, shift: int) -> None:
        super().__init__()
        d = cfg.d_model
        self.norm1 = LayerNorm(d, eps=ESPNET_EPS)
        self.feed_forward = DecoderFeedForward(d, cfg.decoder_linear_units)
        self.self_attn = DecoderFsmn(d, cfg.decoder_kernel_size, shift) if memory else None
        if memory:
            self.norm2 = LayerNorm(d, eps=ESPNET_EPS)
        self.src_attn = CrossAttention(d, cfg.decoder_heads) if cross else None
        if cross:
            self.norm3 = LayerNorm(d, eps=ESPNET_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor,
                memory_lens: torch.Tensor) -> torch.Tensor:
        y = self.feed_forward(self.norm1(x))
        if self.self_attn is None:
            return y
        x = x + self.self_attn(self.norm2(y), mask)
        if self.src_attn is not None:
            x = x + self.src_attn(self.norm3(x), memory, memory_lens)
        return x


class ParaformerDecoder(nn.Module):
    """embeds (B, K, C), token_lens (B,), encoder (B, T, C), lens (B,) -> logits (B, K, V)."""

    def __init__(self, cfg: ParaformerConfig) -> None:
        super().__init__()
        n_att = cfg.decoder_att_layers
        self.decoders = nn.ModuleList(
            [DecoderLayer(cfg, True, True, cfg.decoder_sanm_shift) for _ in range(n_att)])
        rest = cfg.decoder_layers - n_att
        self.decoders2 = nn.ModuleList(
            [DecoderLayer(cfg, True, False, 0) for _ in range(rest)]) if rest > 0 else None
        self.decoders3 = nn.ModuleList([DecoderLayer(cfg, False, False, 0)])
        self.after_norm = LayerNorm(cfg.d_model, eps=ESPNET_EPS)
        self.output_layer = Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, embeds: torch.Tensor, token_lens: torch.Tensor, memory: torch.Tensor,
                memory_lens: torch.Tensor) -> torch.Tensor:
        mask = _lengths_mask(token_lens.to(embeds.device), embeds.shape[1])
        x = embeds
        layers = [*self.decoders, *(self.decoders2 or ()), *self.decoders3]
        for layer in layers:
            x = layer(x, mask, memory, memory_lens)
        return self.output_layer(self.after_norm(x))
