"""The Conformer encoder (WeNet's ``ConformerEncoder``): whole utterances batched (optionally
chunk-masked), and chunk by chunk over paged K/V (``forward_chunk_paged``, the ``paged``
streaming runtime) when the checkpoint is causal and chunk-trained.

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

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import Gelu, Relu, Swish, glu
from oasr.layers.batchnorm import BatchNorm1d
from oasr.layers.conv import DepthwiseConv1d
from oasr.layers.ffn import FeedForward
from oasr.layers.linear import PointwiseConv1d
from oasr.layers.norm import LayerNorm
from oasr.models.base import BaseEncoder, StreamingStateSpec
from oasr.models.conformer.attention import RelPositionMultiHeadedAttention
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.subsampling import Conv2dSubsampling, subsampled_lengths

if TYPE_CHECKING:
    from oasr.cache.paged_stream import ChunkKv

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

    def forward_chunk(self, x: torch.Tensor, cache: torch.Tensor,
                      lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A causal chunk: x (B, t, C) after the stream's ``cache`` (B, lorder, C), the last
        ``lorder`` inputs so far (zeros at the start, as the offline left padding) ->
        (out (B, t, C), new cache (B, lorder, C): the last inputs of each row's ``lens`` valid
        frames)."""
        h = torch.cat([cache.to(x.dtype), x], dim=1)
        idx = lens.to(x.device)[:, None] + torch.arange(self.lorder, device=x.device)[None]
        new_cache = h.gather(1, idx[..., None].expand(-1, -1, h.shape[2]))
        h = self.depthwise_conv(glu(self.pointwise_conv1(h), dim=-1))
        return self.pointwise_conv2(self.activation(self.norm(h))), new_cache


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

    def forward_chunk(self, x: torch.Tensor, layer: int, kv: ChunkKv, key_pos: torch.Tensor,
                      conv_cache: torch.Tensor | None, lens: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One chunk of every stream in a cohort; conv_cache (B, lorder, C) or ``None``."""
        if self.feed_forward_macaron is not None:
            x = x + self.ff_scale * self.feed_forward_macaron(self.norm_ff_macaron(x))
        x = x + self.self_attn.forward_paged(self.norm_mha(x), layer, kv, key_pos)
        new_cache = None
        if self.conv_module is not None:
            y, new_cache = self.conv_module.forward_chunk(self.norm_conv(x), conv_cache, lens)
            x = x + y
        x = x + self.ff_scale * self.feed_forward(self.norm_ff(x))
        if self.conv_module is not None:
            x = self.norm_final(x)
        return x, new_cache


def chunk_mask(frames: int, chunk: int, device: torch.device,
               left_chunks: int = -1) -> torch.Tensor:
    """(1, 1, T, T) bool: query i sees every key up to the end of its own chunk, and from
    ``left_chunks`` chunks before its own (``-1``: from the start)."""
    idx = torch.arange(frames, device=device)
    own = torch.div(idx, chunk, rounding_mode="floor")
    visible = idx[None, :] < ((own + 1) * chunk)[:, None]
    if left_chunks >= 0:
        visible &= idx[None, :] >= ((own - left_chunks).clamp_min(0) * chunk)[:, None]
    return visible[None, None]


def streams_chunk_wise(cfg: ConformerConfig) -> bool:
    """Whether the checkpoint's chunk-wise path equals its chunk-masked offline forward: chunk
    training (dynamic or static) and a convolution module that reads no later frame."""
    trained = cfg.use_dynamic_chunk or cfg.static_chunk_size > 0
    return trained and (cfg.causal or not cfg.use_cnn_module)


class ConformerEncoder(BaseEncoder):
    """Features (B, T, F) + lengths -> hidden (B, T', d_model) + lengths (B,)."""

    streaming_kind = "none"
    # A chunk-wise checkpoint's default decoding chunk (output frames) when it trained with
    # dynamic chunks (WeNet's usual ``decoding_chunk_size``); a static chunk uses its own.
    default_chunk_frames = 16

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
        self.conv_lorder = cfg.cnn_module_kernel - 1 if cfg.use_cnn_module and cfg.causal else 0
        if streams_chunk_wise(cfg):
            self.streaming_kind = "paged"
            self.streaming_chunk_frames = cfg.static_chunk_size or self.default_chunk_frames
            if self.conv_lorder:
                self.streaming_state_specs = (StreamingStateSpec(
                    (cfg.encoder_layers, self.conv_lorder, cfg.d_model), name="cnn_cache"),)

    def configure_streaming(self, chunk_frames: int | None = None,
                            left_chunks: int | None = None) -> None:
        """The decoding chunk (output frames) and the left window in chunks (``-1``: every
        earlier frame), WeNet's ``decoding_chunk_size`` / ``num_decoding_left_chunks``; the
        window lands in ``fixed_attention_window`` (frames) for the paged runtime."""
        if self.streaming_kind != "paged":
            raise ValueError(f"{self.cfg} has no chunk-wise path (needs causal conv and chunk "
                             "training)")
        if chunk_frames is not None:
            if chunk_frames < 1:
                raise ValueError(f"chunk_frames must be >= 1, got {chunk_frames}")
            self.streaming_chunk_frames = chunk_frames
        if left_chunks is not None:
            self.fixed_attention_window = (
                None if left_chunks < 0 else left_chunks * self.streaming_chunk_frames)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Encoder frames of ``lengths`` feature frames (valid subsampling). (B,) int64."""
        return subsampled_lengths(lengths, self.cfg.input_layer)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor,
                chunk_frames: int | None = None,
                left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """features: (B, T, F) float; lengths: (B,) int -> ((B, T', C), (B,) int64).

        chunk_frames: attend in chunks of this many output frames (WeNet's chunk-masked
        offline decoding); ``None``: the checkpoint's own offline mode; 0: full context.
        left_chunks: with ``chunk_frames``, the chunks before its own a query sees (-1: all).
        """
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
        chunk = self.offline_chunk if chunk_frames is None else chunk_frames
        chunks = chunk_mask(t, chunk, x.device, left_chunks) if chunk else None
        for layer in self.encoders:
            x = layer(x, pos, key_mask, chunks, frame_mask)
        return self.after_norm(x), lens

    def forward_chunk_paged(self, features: torch.Tensor, lengths: torch.Tensor, kv: ChunkKv,
                            states: list[torch.Tensor]
                            ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """One chunk of every stream in a cohort (WeNet's ``forward_chunk``).

        Args:
            features: (B, T, F) each row's feature window for this chunk
                (``(chunk - 1) * subsampling_rate + right_context + 1`` frames; a stream's last
                window may be shorter); lengths: (B,) valid frames per row.
            kv: the cohort's paged K/V view, prepared for ``output_lengths(lengths)`` new frames
                per row (``oasr.cache.paged_stream``); each layer writes its chunk's K/V there.
            states: ``streaming_state_specs`` in order, batched: the convolution cache
                (B, layers, lorder, C) when the blocks have a convolution module.

        Returns:
            (out (B, t, C), out_lens (B,), new states).
        """
        x = features if self.global_cmvn is None else self.global_cmvn(features)
        short = self.right_context + 1 - x.shape[1]
        if short > 0:
            x = F.pad(x, (0, 0, 0, short))
        x, _ = self.embed(x)
        lens = self.output_lengths(lengths.to(x.device))
        # The sinusoid at every key slot's absolute frame (WeNet reads the table from
        # ``offset - cache_size``: positions are absolute, not relative to the chunk).
        positions = kv.key_positions()
        table = self.embed.pos_enc(int(positions.max()) + 1).to(x.dtype)
        key_pos = table[positions]
        caches = states[0].movedim(1, 0) if self.conv_lorder else [None] * len(self.encoders)
        new_caches = []
        for i, layer in enumerate(self.encoders):
            x, c = layer.forward_chunk(x, i, kv, key_pos, caches[i], lens)
            new_caches.append(c)
        new_states = [torch.stack(new_caches, dim=1)] if self.conv_lorder else []
        return self.after_norm(x), lens, new_states
