"""Zipformer2 (icefall): multi-resolution stacks between a Conv2d subsampler and a final 2x
downsample.

Each stack runs at ``downsampling_factor[i]`` x the subsampled rate (frames averaged down by
``SimpleDownsample``, repeated back up, then mixed with the stack's input by a learned
per-channel bypass) and at its own width (``convert_num_channels`` truncates or zero-pads
between stacks). The output takes each channel from the most recent stack that has it, then
``SimpleDownsample(2)``. Causal checkpoints use chunk-causal convolutions; offline the whole
utterance is one chunk.

Module names are icefall's, so an icefall ``encoder_embed.*`` / ``encoder.*`` state dict loads
under ``embed.*`` / ``stacks.*`` with the converter's renames only (``converters.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers.norm import BiasNorm
from oasr.models.base import BaseEncoder, StreamingGeometry
from oasr.models.zipformer.attention import (
    NonlinAttention,
    RelPositionAttentionWeights,
    SelfAttention,
    compact_rel_positions,
)
from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.modules import (
    Bypass,
    ConvolutionModule,
    FeedForward,
    SimpleDownsample,
    convert_num_channels,
    upsample,
)
from oasr.models.zipformer.streaming import (
    LOG_EPS,
    SUBSAMPLER_CONTEXT,
    ZipformerStreaming,
    init_states,
    state_specs,
)
from oasr.models.zipformer.streaming import streaming_forward as _streaming_forward
from oasr.models.zipformer.subsampling import Conv2dSubsampling


class ZipformerLayer(nn.Module):
    """ff1, nonlin-attn, attn1, conv1, ff2, mid-bypass, attn2, conv2, ff3, BiasNorm, bypass."""

    def __init__(self, cfg: ZipformerConfig, i: int) -> None:
        super().__init__()
        dim, ff = cfg.encoder_dim[i], cfg.feedforward_dim[i]
        heads, kernel = cfg.num_heads[i], cfg.cnn_module_kernel[i]
        self.bypass = Bypass(dim)
        self.bypass_mid = Bypass(dim)
        self.self_attn_weights = RelPositionAttentionWeights(
            dim, cfg.pos_dim, heads, cfg.query_head_dim[i], cfg.pos_head_dim[i])
        self.self_attn1 = SelfAttention(dim, heads, cfg.value_head_dim[i])
        self.self_attn2 = SelfAttention(dim, heads, cfg.value_head_dim[i])
        self.feed_forward1 = FeedForward(dim, (ff * 3) // 4)
        self.feed_forward2 = FeedForward(dim, ff)
        self.feed_forward3 = FeedForward(dim, (ff * 5) // 4)
        self.nonlin_attention = NonlinAttention(dim, 3 * dim // 4)
        self.conv_module1 = ConvolutionModule(dim, kernel, cfg.causal)
        self.conv_module2 = ConvolutionModule(dim, kernel, cfg.causal)
        # icefall declares this and never reads it; kept so its state dict loads strictly.
        self.bypass_scale = nn.Parameter(torch.full((dim,), 0.5))
        self.norm = BiasNorm(dim)

    def forward(self, src: torch.Tensor, pos_emb: torch.Tensor, chunk_size: int = -1,
                attn_mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        orig = src
        weights = self.self_attn_weights(src, pos_emb, key_padding_mask, attn_mask)
        src = src + self.feed_forward1(src)
        src = src + self.nonlin_attention(src, weights[0:1])
        src = src + self.self_attn1(src, weights)
        src = src + self.conv_module1(src, key_padding_mask, chunk_size)
        src = src + self.feed_forward2(src)
        src = self.bypass_mid(orig, src)
        src = src + self.self_attn2(src, weights)
        src = src + self.conv_module2(src, key_padding_mask, chunk_size)
        src = src + self.feed_forward3(src)
        return self.bypass(orig, self.norm(src))

    def streaming_forward(self, src: torch.Tensor, pos_emb: torch.Tensor,
                          states: list[torch.Tensor], key_padding_mask: torch.Tensor
                          ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One chunk (T, B, C); ``states`` = [key, nonlin, val1, val2, conv1, conv2] caches
        (``Zipformer2.init_states``); ``key_padding_mask`` (B, L + T) covers the cached
        frames too."""
        key, nonlin, val1, val2, conv1, conv2 = states
        chunk_mask = key_padding_mask[:, key.shape[0]:]
        orig = src
        weights, key = self.self_attn_weights.streaming_forward(src, pos_emb, key,
                                                                key_padding_mask)
        src = src + self.feed_forward1(src)
        na, nonlin = self.nonlin_attention.streaming_forward(src, weights[0:1], nonlin)
        src = src + na
        att, val1 = self.self_attn1.streaming_forward(src, weights, val1)
        src = src + att
        conv, conv1 = self.conv_module1.streaming_forward(src, conv1, chunk_mask)
        src = src + conv
        src = src + self.feed_forward2(src)
        src = self.bypass_mid(orig, src)
        att, val2 = self.self_attn2.streaming_forward(src, weights, val2)
        src = src + att
        conv, conv2 = self.conv_module2.streaming_forward(src, conv2, chunk_mask)
        src = src + conv
        src = src + self.feed_forward3(src)
        return self.bypass(orig, self.norm(src)), [key, nonlin, val1, val2, conv1, conv2]


class ZipformerStack(nn.Module):
    """``num_encoder_layers[i]`` layers sharing one relative-position encoding."""

    def __init__(self, cfg: ZipformerConfig, i: int) -> None:
        super().__init__()
        self.pos_dim = cfg.pos_dim
        self.layers = nn.ModuleList(ZipformerLayer(cfg, i)
                                    for _ in range(cfg.num_encoder_layers[i]))

    def forward(self, src: torch.Tensor, chunk_size: int = -1,
                attn_mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        pos_emb = compact_rel_positions(src.shape[0], self.pos_dim, src.device, src.dtype)
        for layer in self.layers:
            src = layer(src, pos_emb, chunk_size, attn_mask, key_padding_mask)
        return src

    def streaming_forward(self, src: torch.Tensor, states: list[torch.Tensor], left: int,
                          key_padding_mask: torch.Tensor
                          ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        pos_emb = compact_rel_positions(src.shape[0], self.pos_dim, src.device, src.dtype,
                                        left)
        new: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            src, layer_states = layer.streaming_forward(src, pos_emb, states[6 * i:6 * i + 6],
                                                        key_padding_mask)
            new += layer_states
        return src, new


class DownsampledStack(nn.Module):
    """A stack at 1/ds the frame rate: downsample, the stack, repeat up, bypass-combine."""

    def __init__(self, cfg: ZipformerConfig, i: int) -> None:
        super().__init__()
        self.factor = cfg.downsampling_factor[i]
        self.downsample = SimpleDownsample(self.factor)
        self.encoder = ZipformerStack(cfg, i)
        self.out_combiner = Bypass(cfg.encoder_dim[i])

    def forward(self, src: torch.Tensor, chunk_size: int = -1,
                attn_mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``lengths`` (B,): the rows' frames at the input rate (see ``SimpleDownsample``)."""
        ds = self.factor
        out = self.downsample(src, lengths)
        if attn_mask is not None:
            attn_mask = attn_mask[::ds, ::ds]
        out = self.encoder(out, chunk_size // ds if chunk_size > 0 else chunk_size,
                           attn_mask, key_padding_mask)
        return self.out_combiner(src, upsample(out, ds)[:src.shape[0]])

    @property
    def layers(self) -> nn.ModuleList:
        return self.encoder.layers

    def streaming_forward(self, src: torch.Tensor, states: list[torch.Tensor], left: int,
                          key_padding_mask: torch.Tensor
                          ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        out, states = self.encoder.streaming_forward(self.downsample(src), states, left,
                                                     key_padding_mask)
        return self.out_combiner(src, upsample(out, self.factor)[:src.shape[0]]), states


class Zipformer2(nn.Module):
    """(T, B, C_embed) -> (ceil(T / 2), B, max(encoder_dim)); icefall's ``Zipformer``."""

    def __init__(self, cfg: ZipformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoders = nn.ModuleList(
            DownsampledStack(cfg, i) if cfg.downsampling_factor[i] != 1
            else ZipformerStack(cfg, i) for i in range(len(cfg.downsampling_factor)))
        self.downsample_output = SimpleDownsample(cfg.output_downsampling_factor)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                chunk_size: int = -1, attn_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        cfg, outputs = self.cfg, []
        # Each row's frames, so every downsample pads a row as it pads the row alone: a row's
        # result does not depend on what else is in the batch (icefall's decode of one file).
        lengths = None if key_padding_mask is None else (~key_padding_mask).sum(dim=1)
        for i, module in enumerate(self.encoders):
            ds = cfg.downsampling_factor[i]
            x = convert_num_channels(x, cfg.encoder_dim[i])
            mask = None if key_padding_mask is None else key_padding_mask[..., ::ds]
            if isinstance(module, DownsampledStack):
                x = module(x, chunk_size, attn_mask, mask, lengths)
            else:
                x = module(x, chunk_size, attn_mask, mask)
            outputs.append(x)
        return self.downsample_output(self.full_dim_output(outputs), lengths)

    def init_states(self, batch: int, left_context_frames: int, device: torch.device,
                    dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
        """Zeroed caches, six per layer in stack order: key (L, B, H * qd), nonlin
        (1, B, L, 3C/4), val1 / val2 (L, B, H * vd), conv1 / conv2 (B, kernel // 2, C), with
        L = left_context_frames // downsampling_factor of the layer's stack."""
        cfg, states = self.cfg, []
        for i, module in enumerate(self.encoders):
            left = left_context_frames // cfg.downsampling_factor[i]
            dim, heads = cfg.encoder_dim[i], cfg.num_heads[i]
            for _ in module.layers:
                def z(*shape: int) -> torch.Tensor:
                    return torch.zeros(*shape, device=device, dtype=dtype)
                conv = cfg.cnn_module_kernel[i] // 2
                states += [z(left, batch, heads * cfg.query_head_dim[i]),
                           z(1, batch, left, 3 * dim // 4),
                           z(left, batch, heads * cfg.value_head_dim[i]),
                           z(left, batch, heads * cfg.value_head_dim[i]),
                           z(batch, conv, dim), z(batch, conv, dim)]
        return states

    def streaming_forward(self, x: torch.Tensor, states: list[torch.Tensor],
                          left_context_frames: int, key_padding_mask: torch.Tensor
                          ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One chunk (T, B, C_embed) of a causal model -> (ceil(T / 2), B, C_out) and the new
        caches; ``key_padding_mask`` (B, left_context_frames + T), True where a cached frame
        does not exist yet or a chunk frame is padding."""
        cfg, outputs, new = self.cfg, [], []
        offset = 0
        for i, module in enumerate(self.encoders):
            ds = cfg.downsampling_factor[i]
            n = 6 * len(module.layers)
            x = convert_num_channels(x, cfg.encoder_dim[i])
            x, layer_states = module.streaming_forward(
                x, states[offset:offset + n], left_context_frames // ds,
                key_padding_mask[..., ::ds])
            offset += n
            outputs.append(x)
            new += layer_states
        return self.downsample_output(self.full_dim_output(outputs)), new

    def full_dim_output(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        dims = self.cfg.encoder_dim
        pieces, cur = [outputs[-1]], dims[-1]
        for i in range(len(dims) - 2, -1, -1):
            if dims[i] > cur:
                pieces.append(outputs[i][..., cur:dims[i]])
                cur = dims[i]
        return torch.cat(pieces, dim=-1)


class ZipformerEncoder(BaseEncoder):
    """Features (B, T, F) -> hidden states (B, T', max(encoder_dim)), T' = ((T - 7) // 2 + 1)
    // 2."""

    streaming_pad_value = LOG_EPS  # what a padding row's (and the input end's) frames hold

    def __init__(self, cfg: ZipformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.subsampling_rate = cfg.subsampling_rate
        # Causal checkpoints stream chunk-wise through the slot runtime (every cache has a
        # fixed extent: ``streaming.py``) and decode offline with the chunk mask icefall decodes
        # them with; the others decode whole utterances.
        self.streaming_kind = "slot" if cfg.causal else "none"
        self.streaming: ZipformerStreaming | None = None
        self.chunk_size, self.left_context_frames = -1, -1
        self._no_streaming = ("this Zipformer checkpoint is not causal (no chunk-wise path); "
                              "streaming needs one trained with --causal 1")
        self.embed = Conv2dSubsampling(cfg.feature_dim, cfg.encoder_dim[0],
                                       cfg.layer1_channels, cfg.layer2_channels,
                                       cfg.layer3_channels)
        self.stacks = Zipformer2(cfg)
        if cfg.causal:
            self.configure_chunks()

    @property
    def output_dim(self) -> int:
        return self.cfg.output_dim

    # -- chunks (causal checkpoints) ----------------------------------------------------------
    def configure_chunks(self, chunk_size: int | None = None,
                         left_context_frames: int | None = None) -> None:
        """icefall's ``--chunk-size`` / ``--left-context-frames`` (subsampled, 50 Hz frames;
        -1: whole utterance / all) for the offline chunk mask and, when both are positive, the
        chunk-wise streaming; ``None``: the checkpoint's ``decode_*`` value."""
        cfg = self.cfg
        if not cfg.causal:
            chosen = [n for n, v in (("chunk_size", chunk_size),
                                     ("left_context_frames", left_context_frames)) if v is not None]
            if chosen:
                raise ValueError(f"{', '.join(chosen)}: this Zipformer checkpoint is not causal "
                                 "(trained without --causal 1); it decodes whole utterances")
            return
        chunk = cfg.decode_chunk_size if chunk_size is None else int(chunk_size)
        left = cfg.decode_left_context_frames if left_context_frames is None else int(
            left_context_frames)
        if chunk != -1 and (chunk < 1 or any(chunk % d for d in cfg.downsampling_factor)):
            raise ValueError(f"chunk_size={chunk} must be -1 or a positive multiple of every "
                             f"downsampling factor {cfg.downsampling_factor}")
        if left < -1:
            raise ValueError(f"left_context_frames={left} must be -1 (all) or >= 0")
        self.chunk_size, self.left_context_frames = chunk, left
        self.streaming = None
        if chunk > 0 and left > 0:
            try:
                self._set_streaming(ZipformerStreaming(chunk, left))
            except ValueError as exc:
                self._no_streaming = str(exc)
        else:
            self._no_streaming = (f"chunk_size={chunk}, left_context_frames={left}: streaming "
                                  "needs both positive (a chunk and a finite left window)")

    # -- streaming (causal checkpoints) -------------------------------------------------------
    def _set_streaming(self, geo: ZipformerStreaming) -> None:
        geo.check(self.cfg)
        self.streaming = geo
        self.streaming_chunk_frames = geo.output_frames
        self.streaming_window_frames = geo.left_context_frames // 2
        # Feature frames of look-ahead past a chunk's last output frame: with it the generic
        # window formula gives ``geo.window``.
        self.right_context = geo.window - (geo.output_frames - 1) * self.subsampling_rate - 1
        self.slot_state_specs = state_specs(self.cfg, geo.left_context_frames)

    def _require_streaming(self) -> ZipformerStreaming:
        if self.streaming is None:
            raise ValueError(self._no_streaming)
        return self.streaming

    def configure_streaming(self, chunk_frames: int | None = None,
                            left_chunks: int | None = None) -> None:
        """The decoding chunk in output frames (icefall's ``--chunk-size`` is twice it) and
        the left window in chunks (``left_context_frames = left_chunks * chunk_size``)."""
        geo = self._require_streaming()
        chunk = geo.chunk_size if chunk_frames is None else 2 * int(chunk_frames)
        if left_chunks is None:
            left = geo.left_context_frames
        elif left_chunks < 1:
            raise ValueError(f"left_chunks={left_chunks}: the slot runtime keeps a fixed left "
                             "window; give left_chunks >= 1")
        else:
            left = left_chunks * chunk
        self._set_streaming(ZipformerStreaming(chunk, left))

    def streaming_geometry(self, chunk: int) -> StreamingGeometry:
        geo = self._require_streaming()
        if chunk != geo.output_frames:
            geo = ZipformerStreaming(2 * chunk, geo.left_context_frames)
            geo.check(self.cfg)
        # icefall's tail (``streaming.py``): the subsampler's 13 frames of log(1e-10) and the
        # recipe's ``tail_pad_len``.
        return StreamingGeometry(chunk=geo.output_frames, window=geo.window, stride=geo.stride,
                                 tail=SUBSAMPLER_CONTEXT + self.cfg.decode_tail_pad_frames)

    def get_streaming_init_states(self, batch_size: int = 1,
                                  device: torch.device | str | None = None
                                  ) -> list[torch.Tensor]:
        return init_states(self.slot_state_specs, batch_size, device,
                           next(self.parameters()).dtype)

    def streaming_forward(self, x: torch.Tensor, x_lens: torch.Tensor,
                          states: list[torch.Tensor]
                          ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """One chunk: features (B, T <= window, F), x_lens (B,), the caches
        (``slot_state_specs`` order) -> (B, chunk_frames, C), lengths, the new caches."""
        return _streaming_forward(self, self._require_streaming(), x, x_lens, states)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor,
                chunk_size: int | None = None, left_context_frames: int | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``chunk_size`` > 0 (causal checkpoints): the chunk mask icefall trains and decodes
        with, ``chunk_size`` subsampled frames per chunk seeing ``left_context_frames`` back
        (-1: all), and chunk-causal convolutions; ``None``: the configured values
        (``configure_chunks``; -1 for a non-causal checkpoint). A row's output does not depend
        on the batch it is in."""
        chunk_size = self.chunk_size if chunk_size is None else chunk_size
        if left_context_frames is None:
            left_context_frames = self.left_context_frames
        x, lens = self.embed(features, lengths)
        pad = torch.arange(x.shape[1], device=x.device).unsqueeze(0) >= lens.unsqueeze(1)
        mask = None
        if chunk_size > 0:
            if not self.cfg.causal:
                raise ValueError("chunk_size needs a causal Zipformer checkpoint")
            mask = chunk_mask(self.cfg, x.shape[1], chunk_size, left_context_frames, x.device)
        out = self.stacks(x.transpose(0, 1), pad, chunk_size if chunk_size > 0 else -1, mask)
        return out.transpose(0, 1), torch.div(lens + 1, 2, rounding_mode="floor")


def chunk_mask(cfg: ZipformerConfig, length: int, chunk_size: int, left_context_frames: int,
               device: torch.device) -> torch.Tensor:
    """(T, T) bool, True = masked: frame t sees its own chunk and ``left_context_frames //
    chunk_size`` chunks back (at least one; all when negative)."""
    if any(chunk_size % d for d in cfg.downsampling_factor):
        raise ValueError(f"chunk_size={chunk_size} must divide by every downsampling factor "
                         f"{cfg.downsampling_factor}")
    left = 1_000_000 if left_context_frames < 0 else max(1, left_context_frames // chunk_size)
    c = torch.arange(length, device=device) // chunk_size
    return (c.unsqueeze(0) > c.unsqueeze(1)) | (c.unsqueeze(0) < c.unsqueeze(1) - left)
