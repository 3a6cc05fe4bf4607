"""The cache-aware FastConformer encoder: offline with the chunked-limited mask, or one chunk
at a time from a per-stream cache.

Offline, query frame i attends key j when ``0 <= i // C - j // C <= left_context // C``
(``C = lookahead + 1``), the mask the model was trained with, so a whole utterance encodes
exactly as its chunks do. Streaming, each chunk of ``C`` frames attends the cached keys and
values of the last ``left_context`` frames and itself; the depthwise convolution is causal
(left zero padding offline, the last ``kernel - 1`` GLU outputs of the previous chunk
streaming); the subsampling keeps its own cache (``subsampling.py``).

The block is FastConformer's (macaron FFNs, rel-pos attention, convolution, ``norm_out``) with
the convolution module normalised by LayerNorm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import glu
from oasr.layers.conv import DepthwiseConv1d
from oasr.layers.linear import PointwiseConv1d
from oasr.layers.matmul import bmm
from oasr.layers.norm import LayerNorm
from oasr.models.base import BaseEncoder, StreamingGeometry
from oasr.models.fastconformer.attention import RelPositionAttention, relative_sinusoids
from oasr.models.fastconformer.encoder import FastConformerBlock
from oasr.models.nemotron_streaming.config import NemotronStreamingConfig
from oasr.models.nemotron_streaming.subsampling import CausalSubsampling

__all__ = ["EncoderCache", "NemotronStreamingEncoder", "chunked_limited_mask"]


def chunked_limited_mask(queries: torch.Tensor, keys: torch.Tensor, chunk: int,
                         left_chunks: int) -> torch.Tensor:
    """(..., Tq, Tk) bool from absolute frame indices (..., Tq) and (..., Tk): key in the
    query's chunk or the ``left_chunks`` chunks before it."""
    diff = (queries // chunk)[..., :, None] - (keys // chunk)[..., None, :]
    return (diff >= 0) & (diff <= left_chunks)


@dataclass
class EncoderCache:
    """One batch of streams' encoder state between chunks.

    subsampling: per strided stage, its last input frames (``CausalSubsampling``);
    keys / values: per layer (B, H, <= left_context, D); conv: per layer (B, kernel - 1, C)
    GLU outputs; frames: encoder frames emitted so far (absolute index of the next one).
    """

    subsampling: list[torch.Tensor]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    conv: list[torch.Tensor]
    frames: int = 0


class CachedRelPositionAttention(RelPositionAttention):
    """FastConformer's rel-pos attention over cached keys + the current frames."""

    def attend(self, x: torch.Tensor, mask: torch.Tensor, past_k: torch.Tensor | None,
               past_v: torch.Tensor | None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, Tq, C) normed; mask (B or 1, 1, Tq, Tk) bool over [past; x] keys; past_k/v
        (B, H, Tp, D) -> out (B, Tq, C), keys and values (B, H, Tk, D)."""
        b, tq, c = x.shape
        h, d = self.heads, self.head_dim
        q = self.linear_q(x).view(b, tq, h, d)
        k = self.linear_k(x).view(b, tq, h, d).transpose(1, 2)
        v = self.linear_v(x).view(b, tq, h, d).transpose(1, 2)
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        tk = k.shape[2]
        pos = relative_sinusoids(tk, c, x.device, x.dtype)
        p = self.linear_pos(pos).view(2 * tk - 1, h, d).transpose(0, 1)  # (H, 2Tk-1, D)
        scale = 1.0 / math.sqrt(d)
        q_u = (q + self.pos_bias_u).transpose(1, 2).reshape(b * h, tq, d)
        content = bmm(q_u, k.reshape(b * h, tk, d).transpose(1, 2)).view(b, h, tq, tk)
        q_v = (q + self.pos_bias_v).permute(2, 0, 1, 3).reshape(h, b * tq, d)
        by_distance = bmm(q_v, p.transpose(1, 2)).view(h, b, tq, 2 * tk - 1).transpose(0, 1)
        # query i sits at key index past + i; distance past + i - j is column Tq - 1 - i + j
        qi = torch.arange(tq, device=x.device)
        kj = torch.arange(tk, device=x.device)
        cols = (tq - 1 - qi[:, None] + kj[None, :]).expand(b, h, tq, tk)
        position = by_distance.gather(-1, cols)
        probs = self.softmax(content * scale, position * scale, mask)
        out = bmm(probs.reshape(b * h, tq, tk), v.reshape(b * h, tk, d)).view(b, h, tq, d)
        return self.linear_out(out.transpose(1, 2).reshape(b, tq, c)), k, v


class CausalConvolutionModule(nn.Module):
    """Pointwise conv + GLU, causal depthwise conv, LayerNorm, activation, pointwise conv."""

    def __init__(self, d_model: int, kernel: int, bias: bool, eps: float, activation: str
                 ) -> None:
        super().__init__()
        self.lorder = kernel - 1
        self.pointwise_conv1 = PointwiseConv1d(d_model, 2 * d_model, bias=bias)
        self.depthwise_conv = DepthwiseConv1d(d_model, kernel, padding=0, bias=bias)
        self.norm = LayerNorm(d_model, eps=eps)
        self.act = {"silu": F.silu, "relu": F.relu, "gelu": F.gelu}[activation]
        self.pointwise_conv2 = PointwiseConv1d(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, frame_mask: torch.Tensor | None,
                past: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C); frame_mask (B, T) or None; past (B, kernel - 1, C) GLU outputs or None
        (zeros) -> (B, T, C) and the new past."""
        h = glu(self.pointwise_conv1(x), dim=-1)
        if frame_mask is not None:
            h = h * frame_mask[:, :, None].to(h.dtype)
        if past is None:
            h = F.pad(h, (0, 0, self.lorder, 0))
        else:
            h = torch.cat([past, h], dim=1)
        new_past = h[:, h.shape[1] - self.lorder:]
        h = self.depthwise_conv(h)
        return self.pointwise_conv2(self.act(self.norm(h))), new_past


class NemotronStreamingBlock(FastConformerBlock):
    """Parakeet's block with cached attention and the causal convolution module."""

    @staticmethod
    def attention(cfg: NemotronStreamingConfig) -> nn.Module:
        return CachedRelPositionAttention(cfg.d_model, cfg.heads, bias=cfg.attention_bias)

    @staticmethod
    def convolution(cfg: NemotronStreamingConfig) -> nn.Module:
        return CausalConvolutionModule(cfg.d_model, cfg.conv_kernel, cfg.conv_bias,
                                       cfg.norm_eps, cfg.activation)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, frame_mask: torch.Tensor | None,
                past_k: torch.Tensor | None = None, past_v: torch.Tensor | None = None,
                past_conv: torch.Tensor | None = None):
        x = x + 0.5 * self.ff1(self.norm_ff1(x))
        a, k, v = self.attn.attend(self.norm_attn(x), mask, past_k, past_v)
        x = x + a
        c, conv = self.conv(self.norm_conv(x), frame_mask, past_conv)
        x = x + c
        x = x + 0.5 * self.ff2(self.norm_ff2(x))
        return self.norm_out(x), k, v, conv


class NemotronStreamingEncoder(BaseEncoder):
    """Features (B, T, F) + lengths (B,) -> hidden (B, T', d_model) + lengths (B,); or, chunk
    by chunk, ``forward_chunk(feats, cache)``."""

    streaming_kind = "stateful"

    def __init__(self, cfg: NemotronStreamingConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.subsampling_rate = cfg.subsampling_factor
        # input frames past a chunk's last output frame that it reads
        self.right_context = cfg.subsampling_factor * cfg.lookahead
        self.streaming_chunk_frames = cfg.chunk_frames
        self.streaming_window_frames = cfg.left_context
        self.subsampling = CausalSubsampling(cfg)
        self.scale = math.sqrt(cfg.d_model) if cfg.xscale else 1.0
        self.layers = nn.ModuleList(NemotronStreamingBlock(cfg) for _ in range(cfg.layers))

    def configure_streaming(self, chunk_frames: int | None = None,
                            left_chunks: int | None = None) -> None:
        """Pick one of the checkpoint's trained right contexts: ``chunk_frames = lookahead + 1``
        (offline and streaming both follow it). The left context is the checkpoint's, so
        ``left_chunks`` may only restate ``left_context // chunk_frames``."""
        cfg = self.cfg
        r = cfg.lookahead if chunk_frames is None else int(chunk_frames) - 1
        if r not in cfg.lookaheads:
            raise ValueError(f"chunk of {r + 1} frames (lookahead {r}): this checkpoint was "
                             f"trained with lookaheads {list(cfg.lookaheads)}, chunks of "
                             f"{[x + 1 for x in cfg.lookaheads]} frames")
        if left_chunks is not None and left_chunks != cfg.left_context // (r + 1):
            raise ValueError(f"left_chunks={left_chunks}: the left context is the checkpoint's "
                             f"{cfg.left_context} frames ({cfg.left_context // (r + 1)} chunks "
                             f"of {r + 1})")
        cfg.lookahead = r
        self.right_context = cfg.subsampling_factor * r
        self.streaming_chunk_frames = r + 1

    def streaming_geometry(self, chunk: int) -> StreamingGeometry:
        """``first_chunk_features`` frames first, then ``chunk_features``, none re-read (the
        subsampling caches its own left frames); a last short chunk is zero-padded."""
        if chunk != self.streaming_chunk_frames:
            raise ValueError(f"chunk of {chunk} frames: this encoder is configured for "
                             f"{self.streaming_chunk_frames} (configure_streaming picks one of "
                             f"the trained lookaheads {list(self.cfg.lookaheads)})")
        per = self.cfg.chunk_features()
        return StreamingGeometry(chunk, window=per, stride=per,
                                 first_window=self.cfg.first_chunk_features(), pad_last=True)

    def _context(self, lookahead: int | None) -> tuple[int, int]:
        r = self.cfg.lookahead if lookahead is None else int(lookahead)
        if r < 0:
            raise ValueError(f"lookahead={r} (>= 0)")
        chunk = r + 1
        return chunk, self.cfg.left_context // chunk

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor,
                lookahead: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        chunk, left_chunks = self._context(lookahead)
        x, lens = self.subsampling(feats, lengths)
        if self.scale != 1.0:
            x = x * self.scale
        t = x.shape[1]
        idx = torch.arange(t, device=x.device)
        frame_mask = idx[None, :] < lens[:, None]
        mask = (chunked_limited_mask(idx, idx, chunk, left_chunks)[None, None]
                & frame_mask[:, None, None, :])
        for layer in self.layers:
            x = layer(x, mask, frame_mask)[0]
        return x, lens

    def init_cache(self, batch: int, device: torch.device, dtype: torch.dtype
                   ) -> EncoderCache:
        h, d = self.cfg.heads, self.cfg.d_model // self.cfg.heads
        n, c, k = len(self.layers), self.cfg.d_model, self.cfg.conv_kernel
        empty = torch.zeros(batch, h, 0, d, device=device, dtype=dtype)
        return EncoderCache(
            subsampling=self.subsampling.init_cache(batch, device, dtype),
            keys=[empty] * n, values=[empty] * n,
            conv=[torch.zeros(batch, k - 1, c, device=device, dtype=dtype) for _ in range(n)])

    def forward_chunk(self, feats: torch.Tensor, cache: EncoderCache,
                      lookahead: int | None = None) -> tuple[torch.Tensor, EncoderCache]:
        """One chunk of features (``first_chunk_features`` frames first, ``chunk_features``
        after) -> its (B, T', d_model) frames and the cache for the next chunk."""
        chunk, left_chunks = self._context(lookahead)
        x, sub = self.subsampling.forward_chunk(feats, cache.subsampling)
        if self.scale != 1.0:
            x = x * self.scale
        tq, past = x.shape[1], cache.keys[0].shape[2] if cache.keys else 0
        q_idx = torch.arange(cache.frames, cache.frames + tq, device=x.device)
        k_idx = torch.arange(cache.frames - past, cache.frames + tq, device=x.device)
        mask = chunked_limited_mask(q_idx, k_idx, chunk, left_chunks)[None, None]
        keep = self.cfg.left_context
        keys, values, conv = [], [], []
        for i, layer in enumerate(self.layers):
            x, k, v, c = layer(x, mask, None, cache.keys[i], cache.values[i], cache.conv[i])
            keys.append(k[:, :, k.shape[2] - min(keep, k.shape[2]):])
            values.append(v[:, :, v.shape[2] - min(keep, v.shape[2]):])
            conv.append(c)
        return x, EncoderCache(sub, keys, values, conv, cache.frames + tq)

    # -- the list-state API (the ``stateful`` runtime) ----------------------------------------
    # [subsampling stage caches..., keys per layer, values per layer, conv per layer, frames],
    # every tensor batch-first and fixed-extent so a cohort stacks on dim 0: a stage keeps its
    # last ``k - 1`` input frames (a later chunk reads the last ``k - s``), K/V the last
    # ``left_context`` frames (those before a stream's first frame are masked out), ``frames``
    # (B,) the encoder frames a stream has produced (0: its next chunk is its first).

    def get_streaming_init_states(self, batch_size: int = 1,
                                  device: torch.device | str | None = None
                                  ) -> list[torch.Tensor]:
        p = next(self.parameters())
        device = p.device if device is None else torch.device(device)
        cache = self.init_cache(batch_size, device, p.dtype)
        h, d = self.cfg.heads, self.cfg.d_model // self.cfg.heads
        kv = torch.zeros(batch_size, h, self.cfg.left_context, d, device=device, dtype=p.dtype)
        n = len(self.layers)
        return [*cache.subsampling, *[kv.clone() for _ in range(2 * n)], *cache.conv,
                torch.zeros(batch_size, dtype=torch.int64, device=device)]

    def streaming_forward(self, x: torch.Tensor, x_lens: torch.Tensor,
                          states: list[torch.Tensor]
                          ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """One chunk per row: ``first_chunk_features`` frames for a row whose ``frames`` is 0,
        ``chunk_features`` after (pad a last short chunk with zero frames) -> (B, chunk, C),
        (B,) lengths and the new states."""
        cfg, n = self.cfg, len(self.layers)
        stages = len(states) - 3 * n - 1
        sub, frames = states[:stages], states[-1]
        keys, values = states[stages:stages + n], states[stages + n:stages + 2 * n]
        conv = states[stages + 2 * n:stages + 3 * n]
        first = frames == 0
        need = torch.where(first, cfg.first_chunk_features(), cfg.chunk_features())
        lens = x_lens.to(need.device)
        if bool((lens != need).any()):
            raise ValueError(
                f"nemotron_streaming chunks are {cfg.first_chunk_features()} feature frames "
                f"first, then {cfg.chunk_features()} (lookahead={cfg.lookahead}); got "
                f"{lens.tolist()} for rows at encoder frames {frames.tolist()}: pad a last "
                "short chunk with zero frames")
        b, tq = x.shape[0], cfg.chunk_frames
        k, s = self.subsampling.kernel, self.subsampling.stride
        h = x.new_zeros(b, tq, cfg.d_model)
        new_sub = [torch.empty_like(c) for c in sub]
        for rows, is_first in ((first, True), (~first, False)):
            idx = rows.nonzero().flatten()
            if not idx.numel():
                continue
            width = cfg.first_chunk_features() if is_first else cfg.chunk_features()
            # a stage keeps k - 1 frames; a later chunk reads the last k - s of them
            used = [c[idx] if is_first else c[idx, s - 1:] for c in sub]
            y, kept = self.subsampling.forward_chunk(x[idx, :width], used, keep=k - 1)
            h[idx] = y
            for i, c in enumerate(kept):
                new_sub[i][idx] = c
        if self.scale != 1.0:
            h = h * self.scale
        lc = cfg.left_context
        q_idx = frames[:, None] + torch.arange(tq, device=frames.device)
        k_idx = frames[:, None] - lc + torch.arange(lc + tq, device=frames.device)
        chunk, left_chunks = self._context(None)
        mask = (chunked_limited_mask(q_idx, k_idx, chunk, left_chunks)
                & (k_idx >= 0)[:, None, :])[:, None]
        new_k, new_v, new_conv = [], [], []
        for i, layer in enumerate(self.layers):
            h, kk, vv, cc = layer(h, mask, None, keys[i], values[i], conv[i])
            new_k.append(kk[:, :, kk.shape[2] - lc:])
            new_v.append(vv[:, :, vv.shape[2] - lc:])
            new_conv.append(cc)
        out_lens = torch.full((b,), tq, dtype=torch.int64, device=h.device)
        return h, out_lens, [*new_sub, *new_k, *new_v, *new_conv, frames + tq]
