"""The FastConformer encoder, offline: whole utterances, batched.

Block (pre-norm, macaron): ``x += 0.5 * FFN1(norm(x))``; ``x += RelPosMHA(norm(x))``;
``x += Conv(norm(x))``; ``x += 0.5 * FFN2(norm(x))``; ``x = norm_out(x)``. The encoder
subsamples 8x (``subsampling``), scales by ``sqrt(d_model)`` when ``xscale``, and runs the
blocks; there is no final norm beyond each block's own.

Padding never reaches a valid frame: attention masks padded keys and the convolution module
zeroes padded frames before its depthwise conv, so a row's output equals its unpadded output.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers.ffn import FeedForward
from oasr.layers.norm import LayerNorm
from oasr.models.base import BaseEncoder
from oasr.models.conformer.encoder import ConvolutionModule
from oasr.models.fastconformer.attention import RelPositionAttention, relative_sinusoids
from oasr.models.fastconformer.config import FastConformerConfig
from oasr.models.fastconformer.subsampling import DepthwiseSeparableSubsampling

__all__ = ["FastConformerBlock", "FastConformerEncoder"]

# The conformer convolution module names SiLU "swish".
_CONV_ACTIVATION = {"silu": "swish", "relu": "relu", "gelu": "gelu"}


class FastConformerBlock(nn.Module):
    """Macaron FFN halves around attention and the convolution module; a streaming variant
    swaps those two (``attention`` / ``convolution``), keeping the parameter names."""

    def __init__(self, cfg: FastConformerConfig) -> None:
        super().__init__()
        d, eps = cfg.d_model, cfg.norm_eps
        act = "swish" if cfg.activation == "silu" else cfg.activation
        self.norm_ff1 = LayerNorm(d, eps=eps)
        self.ff1 = FeedForward(d, cfg.ff_dim, act, bias=cfg.attention_bias)
        self.norm_attn = LayerNorm(d, eps=eps)
        self.attn = self.attention(cfg)
        self.norm_conv = LayerNorm(d, eps=eps)
        self.conv = self.convolution(cfg)
        self.norm_ff2 = LayerNorm(d, eps=eps)
        self.ff2 = FeedForward(d, cfg.ff_dim, act, bias=cfg.attention_bias)
        self.norm_out = LayerNorm(d, eps=eps)

    @staticmethod
    def attention(cfg: FastConformerConfig) -> nn.Module:
        return RelPositionAttention(cfg.d_model, cfg.heads, bias=cfg.attention_bias)

    @staticmethod
    def convolution(cfg: FastConformerConfig) -> nn.Module:
        return ConvolutionModule(cfg.d_model, cfg.conv_kernel, "batch_norm",
                                 _CONV_ACTIVATION[cfg.activation], causal=False,
                                 bias=cfg.conv_bias, norm_eps=cfg.bn_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor,
                frame_mask: torch.Tensor) -> torch.Tensor:
        # add(alpha=0.5): one pass where `x + 0.5 * y` makes two, the same rounding (the
        # halving is exact)
        x = torch.add(x, self.ff1(self.norm_ff1(x)), alpha=0.5)
        x = x + self.attn(self.norm_attn(x), pos, key_mask)
        x = x + self.conv(self.norm_conv(x), frame_mask)
        x = torch.add(x, self.ff2(self.norm_ff2(x)), alpha=0.5)
        return self.norm_out(x)


class FastConformerEncoder(BaseEncoder):
    """Features (B, T, F) + lengths (B,) -> hidden (B, T', d_model) + lengths (B,)."""

    streaming_kind = "none"
    right_context = 0

    def __init__(self, cfg: FastConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.subsampling_rate = cfg.subsampling_factor
        self.subsampling = DepthwiseSeparableSubsampling(cfg)
        self.scale = math.sqrt(cfg.d_model) if cfg.xscale else 1.0
        self.layers = nn.ModuleList(FastConformerBlock(cfg) for _ in range(cfg.layers))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        x, lens = self.subsampling(feats, lengths)
        if self.scale != 1.0:
            x = x * self.scale
        t = x.shape[1]
        frame_mask = torch.arange(t, device=x.device)[None, :] < lens[:, None]  # (B, T')
        key_mask = frame_mask[:, None, None, :]
        pos = relative_sinusoids(t, self.cfg.d_model, x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, pos, key_mask, frame_mask)
        return x, lens
