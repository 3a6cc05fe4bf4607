"""The Conformer encoder (WeNet's ``ConformerEncoder``), offline: whole utterances, batched.

Block: ``x += 0.5 * FFN_macaron(norm(x))``; ``x += RelPosMHA(norm(x))``;
``x += Conv(norm(x))``; ``x += 0.5 * FFN(norm(x))``; ``x = norm_final(x)``. The encoder applies
the global CMVN it carries (``global_cmvn.mean`` / ``istd``), subsamples, runs the blocks and a
final ``after_norm``.

Padding never reaches a valid frame: attention masks padded keys, and the convolution module
zeroes padded frames just before its depthwise conv, so each row's output equals the
unpadded single-utterance output. (WeNet's own batched forward lets the pointwise conv's bias
leak from padded frames into the last ``(kernel - 1) / 2`` valid frames of shorter rows; its
batch-of-one output is what this matches.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import Gelu, Relu, Swish, glu
from oasr.layers.batchnorm import BatchNorm1d
from oasr.layers.conv import DepthwiseConv1d
from oasr.layers.ffn import FeedForward
from oasr.layers.linear import PointwiseConv1d
from oasr.layers.norm import LayerNorm
from oasr.models.base import BaseEncoder
from oasr.models.conformer.attention import RelPositionMultiHeadedAttention
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.subsampling import Conv2dSubsampling, subsampled_lengths

__all__ = ["ConformerEncoder", "ConformerEncoderLayer", "ConvolutionModule", "GlobalCmvn"]

_ACTIVATIONS = {"swish": Swish, "relu": Relu, "gelu": Gelu}


class GlobalCmvn(nn.Module):
    """``(x - mean) * istd`` per feature bin. Buffers ``mean``, ``istd`` (F,)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("istd", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, F) -> (B, T, F)."""
        return (x - self.mean) * self.istd


class ConvolutionModule(nn.Module):
    """Pointwise conv + GLU, depthwise conv, norm, activation, pointwise conv. (B, T, C).

    Non-causal: the depthwise conv is centred with zero padding. Causal: the input is padded
    with ``kernel - 1`` zero frames on the left *before* the first pointwise conv, as WeNet
    does, so the left context the first frames see is GLU(pointwise bias), not zero.
    """

    def __init__(self, d_model: int, kernel: int, norm: str, activation: str, causal: bool,
                 bias: bool, norm_eps: float) -> None:
        super().__init__()
        self.causal = causal
        self.lorder = kernel - 1 if causal else 0
        self.pointwise_conv1 = PointwiseConv1d(d_model, 2 * d_model, bias=bias)
        padding = 0 if causal else (kernel - 1) // 2
        self.depthwise_conv = DepthwiseConv1d(d_model, kernel, padding=padding, bias=bias)
        self.norm: nn.Module
        if norm == "batch_norm":
            self.norm = BatchNorm1d(d_model, eps=norm_eps)
        else:
            self.norm = LayerNorm(d_model, eps=norm_eps)
        self.activation = _ACTIVATIONS[activation]()
        self.pointwise_conv2 = PointwiseConv1d(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, frame_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, C); frame_mask: (B, T) bool, True = valid -> (B, T, C)."""
        if self.causal:
            # A valid frame only reads earlier frames, so right padding cannot reach it.
            h = glu(self.pointwise_conv1(F.pad(x, (0, 0, self.lorder, 0))), dim=-1)
            h = self.depthwise_conv(h)
        else:
            h = glu(self.pointwise_conv1(x), dim=-1)
            h = self.depthwise_conv(h, mask=frame_mask)
        return self.pointwise_conv2(self.activation(self.norm(h)))


class ConformerEncoderLayer(nn.Module):
    """One pre-norm Conformer block under WeNet's names. (B, T, C) -> (B, T, C)."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d, eps = cfg.d_model, cfg.norm_eps
        self.self_attn = RelPositionMultiHeadedAttention(cfg.encoder_heads, d)
        self.feed_forward = FeedForward(d, cfg.encoder_linear_units, cfg.activation)
        self.norm_ff = LayerNorm(d, eps=eps)
        self.norm_mha = LayerNorm(d, eps=eps)
        self.ff_scale = 0.5 if cfg.macaron_style else 1.0
        self.feed_forward_macaron: FeedForward | None = None
        if cfg.macaron_style:
            self.feed_forward_macaron = FeedForward(d, cfg.encoder_linear_units, cfg.activation)
            self.norm_ff_macaron = LayerNorm(d, eps=eps)
        self.conv_module: ConvolutionModule | None = None
        if cfg.use_cnn_module:
            self.conv_module = ConvolutionModule(
                d, cfg.cnn_module_kernel, cfg.cnn_module_norm, cfg.activation, cfg.causal,
                cfg.conv_bias, cfg.conv_norm_eps,
            )
            self.norm_conv = LayerNorm(d, eps=eps)
            self.norm_final = LayerNorm(d, eps=eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor,
                chunk_mask: torch.Tensor | None, frame_mask: torch.Tensor) -> torch.Tensor:
        if self.feed_forward_macaron is not None:
            x = x + self.ff_scale * self.feed_forward_macaron(self.norm_ff_macaron(x))
        x = x + self.self_attn(self.norm_mha(x), pos, key_mask, chunk_mask)
        if self.conv_module is not None:
            x = x + self.conv_module(self.norm_conv(x), frame_mask)
        x = x + self.ff_scale * self.feed_forward(self.norm_ff(x))
        if self.conv_module is not None:
            x = self.norm_final(x)
        return x


def chunk_mask(frames: int, chunk: int, device: torch.device) -> torch.Tensor:
    """(1, 1, T, T) bool: query i sees every key up to the end of its own chunk."""
    idx = torch.arange(frames, device=device)
    ends = (torch.div(idx, chunk, rounding_mode="floor") + 1) * chunk
    return (idx[None, :] < ends[:, None])[None, None]


class ConformerEncoder(BaseEncoder):
    """Features (B, T, F) + lengths -> hidden (B, T', d_model) + lengths (B,)."""

    streaming_kind = "none"

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.global_cmvn = GlobalCmvn(cfg.input_dim) if cfg.global_cmvn else None
        self.embed = Conv2dSubsampling(cfg.input_dim, cfg.d_model, cfg.input_layer,
                                       cfg.max_positions)
        self.encoders = nn.ModuleList(ConformerEncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.after_norm = LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.subsampling_rate: int = self.embed.subsampling_rate
        self.right_context: int = self.embed.right_context
        # A static-chunk model keeps its chunks offline too (WeNet does); dynamic-chunk models
        # see the whole utterance.
        self.offline_chunk = 0 if cfg.use_dynamic_chunk else cfg.static_chunk_size

    def forward(self, features: torch.Tensor,
                lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features: (B, T, F) float; lengths: (B,) int -> ((B, T', C), (B,) int64)."""
        x = features if self.global_cmvn is None else self.global_cmvn(features)
        short = self.right_context + 1 - x.shape[1]
        if short > 0:
            # Too few frames for one output frame: pad so every row gets a zero-length output.
            x = F.pad(x, (0, 0, 0, short))
        x, pos = self.embed(x)
        t = x.shape[1]
        lens = subsampled_lengths(lengths.to(x.device), self.cfg.input_layer)
        frame_mask = torch.arange(t, device=x.device)[None, :] < lens[:, None]  # (B, T')
        key_mask = frame_mask[:, None, None, :]
        chunks = chunk_mask(t, self.offline_chunk, x.device) if self.offline_chunk else None
        for layer in self.encoders:
            x = layer(x, pos, key_mask, chunks, frame_mask)
        return self.after_norm(x), lens
