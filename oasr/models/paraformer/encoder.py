"""The SAN-M encoder: self-attention with an FSMN memory on its values (FunASR ``SANMEncoder``).

Per layer (pre-norm): ``x + attn(norm1(x))`` where the attention output is
``linear_out(softmax(q k^T / sqrt(d)) v) + fsmn(v)``, and ``fsmn(v) = (v + dwconv(v)) * mask``
over the masked values; then ``x + ffn(norm2(x))``. The first layer (``encoders0``) maps the
stacked features to ``d_model`` and so has no attention residual. The input is scaled by
``sqrt(d_model)`` and gets FunASR's sinusoidal encoding (positions from 1). Module names are
FunASR's state-dict keys.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers import ESPNET_EPS, Attention, DepthwiseConv1d, FeedForward, LayerNorm, Linear
from oasr.models.base import BaseEncoder
from oasr.models.paraformer.config import ParaformerConfig

__all__ = ["SanmAttention", "SanmEncoder", "fsmn_padding", "sinusoidal_encoding"]


def fsmn_padding(kernel_size: int, shift: int) -> tuple[int, int]:
    """(left, right) zero padding of an FSMN memory of ``kernel_size`` shifted by ``shift``."""
    left = (kernel_size - 1) // 2 + max(shift, 0)
    return left, kernel_size - 1 - left


def sinusoidal_encoding(length: int, dim: int, device: torch.device,
                        dtype: torch.dtype) -> torch.Tensor:
    """FunASR's ``SinusoidalPositionEncoder`` table for positions 1..length: (length, dim),
    ``[sin(p * w_i), cos(p * w_i)]`` with ``w_i = 10000 ** (-i / (dim / 2 - 1))``."""
    pos = torch.arange(1, length + 1, device=device, dtype=torch.float32)
    inc = math.log(10000.0) / (dim / 2 - 1)
    inv = torch.exp(torch.arange(dim // 2, device=device, dtype=torch.float32) * -inc)
    t = pos[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=-1).to(dtype)


class SanmAttention(nn.Module):
    """``MultiHeadedAttentionSANM``: x (B, T, in_dim), lens (B,) -> (B, T, d_model)."""

    def __init__(self, in_dim: int, d_model: int, heads: int, kernel_size: int,
                 shift: int) -> None:
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.linear_q_k_v = Linear(in_dim, 3 * d_model)
        self.linear_out = Linear(d_model, d_model)
        self.fsmn_block = DepthwiseConv1d(d_model, kernel_size,
                                          padding=fsmn_padding(kernel_size, shift), bias=False)
        self.attn = Attention(heads, self.d_k)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.linear_q_k_v(x).chunk(3, dim=-1)
        m = mask.to(v.dtype).unsqueeze(-1)
        memory = self.fsmn_block(v, mask, residual=v * m, mask_output=True)

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.reshape(b, t, self.heads, self.d_k).transpose(1, 2)

        ctx = self.attn(heads(q), heads(k), heads(v), kv_lens=lens)
        return self.linear_out(ctx.transpose(1, 2).reshape(b, t, -1)) + memory


class SanmEncoderLayer(nn.Module):
    """``EncoderLayerSANM`` (pre-norm); no attention residual when in_dim != d_model."""

    def __init__(self, in_dim: int, cfg: ParaformerConfig) -> None:
        super().__init__()
        self.residual = in_dim == cfg.d_model
        self.norm1 = LayerNorm(in_dim, eps=ESPNET_EPS)
        self.self_attn = SanmAttention(in_dim, cfg.d_model, cfg.encoder_heads,
                                       cfg.encoder_kernel_size, cfg.encoder_sanm_shift)
        self.norm2 = LayerNorm(cfg.d_model, eps=ESPNET_EPS)
        self.feed_forward = FeedForward(cfg.d_model, cfg.encoder_linear_units, "relu")

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        att = self.self_attn(self.norm1(x), mask, lens)
        x = x + att if self.residual else att
        return x + self.feed_forward(self.norm2(x))


class SanmEncoder(BaseEncoder):
    """Stacked, normalised features (B, T, input_dim), lens (B,) -> (B, T, d_model), lens."""

    subsampling_rate = 1

    def __init__(self, cfg: ParaformerConfig) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.encoders0 = nn.ModuleList([SanmEncoderLayer(cfg.input_dim, cfg)])
        self.encoders = nn.ModuleList(
            [SanmEncoderLayer(cfg.d_model, cfg) for _ in range(cfg.encoder_layers - 1)])
        self.after_norm = LayerNorm(cfg.d_model, eps=ESPNET_EPS)

    def forward(self, x: torch.Tensor,
                lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = x.shape[1]
        lens = lens.to(x.device)
        mask = torch.arange(t, device=x.device)[None, :] < lens[:, None]
        # FunASR scales by sqrt(output_size) even though the input is input_dim wide.
        x = x * self.d_model ** 0.5 + sinusoidal_encoding(t, x.shape[-1], x.device, x.dtype)
        for layer in (*self.encoders0, *self.encoders):
            x = layer(x, mask, lens)
        return self.after_norm(x), lens
