"""The causal Zipformer's chunk-wise streaming: its fixed-extent caches and one chunk's forward.

Framing (icefall's ``streaming_decode.py``): a chunk is ``chunk_size`` subsampled (50 Hz)
frames, ``chunk_size // 2`` output frames. It reads ``2 * chunk_size + 13`` feature frames and
advances by ``2 * chunk_size``: the subsampler's valid convolutions take 7 frames for its first
output, and its ConvNeXt looks 3 subsampled frames (6 feature frames) ahead, which come back as
the next chunk's left context (the ConvNeXt cache). At the input's end icefall appends 13
frames of ``log(1e-10)`` (``LOG_EPS``, the features of digital silence) and keeps taking chunks,
each padded to the full window with the same value, while a chunk would start before the
padded end; every output frame of those chunks is decoded.

The caches, in list order (``state_specs``): per layer, stack by stack, the attention keys
(L, B, H * query_head_dim), the nonlin-attention inputs (1, B, L, 3C/4), both value paths
(L, B, H * value_head_dim) and both convolution left contexts (B, kernel // 2, C), with
L = left_context_frames // the stack's downsampling factor; then the subsampler's ConvNeXt
cache (B, 3, F', C3) and ``processed_lens`` (B,) int64, the subsampled frames seen so far (it
masks the cached frames that do not exist yet). Every extent is fixed, so the whole cache is a
slot cache (``oasr.engine.slot_backend``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from oasr.models.base import StreamingStateSpec
from oasr.models.zipformer.config import ZipformerConfig

__all__ = ["LOG_EPS", "SUBSAMPLER_CONTEXT", "ZipformerStreaming", "state_specs"]

LOG_EPS = math.log(1e-10)
# Feature frames a chunk reads beyond 2 * chunk_size: 7 for the subsampler's first output,
# then 2 x the ConvNeXt's 3 look-ahead frames.
SUBSAMPLER_CONTEXT = 7 + 2 * 3


@dataclass(frozen=True)
class ZipformerStreaming:
    """One decoding configuration: ``chunk_size`` and ``left_context_frames`` in subsampled
    (50 Hz) frames, icefall's ``--chunk-size`` / ``--left-context-frames``."""

    chunk_size: int
    left_context_frames: int

    @property
    def output_frames(self) -> int:
        return (self.chunk_size + 1) // 2

    @property
    def window(self) -> int:
        """Feature frames one chunk reads."""
        return 2 * self.chunk_size + SUBSAMPLER_CONTEXT

    @property
    def stride(self) -> int:
        return 2 * self.chunk_size

    def check(self, cfg: ZipformerConfig) -> None:
        top = max(cfg.downsampling_factor)
        if self.chunk_size < 1 or self.chunk_size % top:
            raise ValueError(f"a Zipformer chunk of {self.chunk_size} subsampled frames must be "
                             f"a positive multiple of the largest downsampling factor {top} "
                             f"(chunk_frames = chunk_size / 2 output frames)")
        if self.left_context_frames < 1 or self.left_context_frames % top:
            raise ValueError(f"left_context_frames={self.left_context_frames} must be a "
                             f"positive multiple of {top}; the slot runtime needs a finite "
                             "left window (left_chunks >= 1)")


def state_specs(cfg: ZipformerConfig, left_context_frames: int) -> tuple[StreamingStateSpec, ...]:
    """The per-stream caches in ``streaming_forward``'s list order (module docstring)."""
    specs: list[StreamingStateSpec] = []
    for i, ds in enumerate(cfg.downsampling_factor):
        left = left_context_frames // ds
        dim, heads = cfg.encoder_dim[i], cfg.num_heads[i]
        conv = cfg.cnn_module_kernel[i] // 2
        for j in range(cfg.num_encoder_layers[i]):
            at = f"stack {i} layer {j}"
            specs += [
                StreamingStateSpec((left, heads * cfg.query_head_dim[i]), f"{at} key", 1),
                StreamingStateSpec((1, left, 3 * dim // 4), f"{at} nonlin attention", 1),
                StreamingStateSpec((left, heads * cfg.value_head_dim[i]), f"{at} val1", 1),
                StreamingStateSpec((left, heads * cfg.value_head_dim[i]), f"{at} val2", 1),
                StreamingStateSpec((conv, dim), f"{at} conv1"),
                StreamingStateSpec((conv, dim), f"{at} conv2"),
            ]
    width = (((cfg.feature_dim - 1) // 2) - 1) // 2
    specs += [StreamingStateSpec((3, width, cfg.layer3_channels), "subsampler ConvNeXt cache"),
              StreamingStateSpec((), "processed_lens", dtype=torch.int64)]
    return tuple(specs)


def init_states(specs: tuple[StreamingStateSpec, ...], batch: int,
                device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """Zeroed caches of ``batch`` streams, each with its batch axis where the spec puts it."""
    out = []
    for s in specs:
        shape = list(s.shape)
        shape.insert(s.batch_dim, batch)
        out.append(torch.full(shape, s.fill, device=device, dtype=s.dtype or dtype))
    return out


def streaming_forward(encoder: Any, geo: ZipformerStreaming, x: torch.Tensor,
                      x_lens: torch.Tensor, states: list[torch.Tensor]
                      ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """One chunk of every row through ``encoder`` (a ``ZipformerEncoder``: its ``embed`` and
    ``stacks``): features (B, T <= window, F) -> (B, output_frames, C),
    lengths (B,) (always ``output_frames``: the padding is decoded, as icefall does) and the
    new caches. Frames at or past a row's ``x_lens`` read as ``LOG_EPS`` (the input's end)."""
    b, t, _ = x.shape
    window = geo.window
    if t > window:
        raise ValueError(f"a Zipformer chunk reads at most {window} feature frames, got {t}")
    frame = torch.arange(window, device=x.device).unsqueeze(0)
    if t < window:
        x = torch.cat([x, x.new_full((b, window - t, x.shape[2]), LOG_EPS)], dim=1)
    x = x.masked_fill((frame >= x_lens.to(x.device).unsqueeze(1)).unsqueeze(-1), LOG_EPS)
    *layer_states, embed_cache, processed = states
    full = torch.full((b,), window, dtype=torch.int64, device=x.device)
    h, _, embed_cache = encoder.embed.streaming_forward(x, full, embed_cache)
    c, left = geo.chunk_size, geo.left_context_frames
    # Cached frames that do not exist yet (fewer than ``left`` seen) are masked.
    seen = (processed.unsqueeze(1) <= torch.arange(left, device=x.device)).flip(1)
    mask = torch.cat([seen, torch.zeros(b, c, dtype=torch.bool, device=x.device)], dim=1)
    out, layer_states = encoder.stacks.streaming_forward(h.transpose(0, 1), layer_states, left,
                                                         mask)
    lens = torch.full((b,), geo.output_frames, dtype=torch.int64, device=x.device)
    return out.transpose(0, 1), lens, [*layer_states, embed_cache, processed + c]
