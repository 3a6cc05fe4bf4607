"""Zipformer2's per-layer modules: feedforward, convolution (plain and chunk-causal), bypass,
and the stacks' downsample / upsample. Layout (T, B, C); parameter names are icefall's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import Sigmoid, swoosh_l, swoosh_r
from oasr.layers.conv import Conv1d
from oasr.layers.linear import Linear


class FeedForward(nn.Module):
    """out_proj(SwooshL(in_proj(x)))."""

    def __init__(self, embed_dim: int, feedforward_dim: int) -> None:
        super().__init__()
        self.in_proj = Linear(embed_dim, feedforward_dim)
        self.out_proj = Linear(feedforward_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(swoosh_l(self.in_proj(x)))


class ChunkCausalDepthwiseConv1d(nn.Module):
    """A causal depthwise conv (half the kernel, left context only) plus a full-kernel conv
    applied within chunks, scaled by a position-in-chunk factor. (B, T, C) -> (B, T, C)."""

    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.causal_conv = Conv1d(channels, channels, (kernel_size + 1) // 2, groups=channels)
        self.chunkwise_conv = Conv1d(channels, channels, kernel_size,
                                     padding=kernel_size // 2, groups=channels)
        self.chunkwise_conv_scale = nn.Parameter(torch.zeros(2, channels, kernel_size))

    def chunk_scale(self, chunk: int) -> torch.Tensor:
        """(C, chunk): 1 + the learned left-edge and right-edge factors."""
        left, right = self.chunkwise_conv_scale[0], self.chunkwise_conv_scale[1]
        if chunk < self.kernel_size:
            left, right = left[:, :chunk], right[:, -chunk:]
        else:
            pad = left.new_zeros(left.shape[0], chunk - self.kernel_size)
            left, right = torch.cat((left, pad), -1), torch.cat((pad, right), -1)
        return 1.0 + left + right

    def forward(self, x: torch.Tensor, chunk_size: int = -1,
                lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``lengths`` (B,): each row's frames (past them ``x`` must be zeros). icefall takes
        the whole sequence as one chunk when ``chunk_size`` is -1 or longer than it, so a row
        alone is one chunk of its own length; with ``lengths`` such rows get that chunk's edge
        scale at their own end, not at the batch's."""
        b, t, c = x.shape
        left = self.kernel_size // 2
        chunk = t if chunk_size < 0 or chunk_size > t else chunk_size
        x = F.pad(x, (0, 0, left, -t % chunk))
        causal = self.causal_conv(x[:, :left + t])
        xc = x[:, left:]
        n = xc.shape[1] // chunk
        conv = self.chunkwise_conv(xc.reshape(b * n, chunk, c)).reshape(b, n * chunk, c)
        out = (conv.reshape(b * n, chunk, c) * self.chunk_scale(chunk).t()).reshape(
            b, n * chunk, c)[:, :t]
        if lengths is not None:
            lengths = lengths.to(x.device)
            whole = (lengths < chunk_size) if chunk_size >= 0 else (lengths < t)
            # The rows that are one chunk alone: the conv over the whole row (zeros past it).
            single = self.chunkwise_conv(xc[:, :t]) if n > 1 else conv[:, :t]
            out = torch.where(whole[:, None, None], single * self.row_scale(lengths, t), out)
        return out + causal

    def row_scale(self, lengths: torch.Tensor, t: int) -> torch.Tensor:
        """(B, t, C): ``chunk_scale(L)`` of each row's length L at its frames (1 past them)."""
        k = self.kernel_size
        left_w, right_w = self.chunkwise_conv_scale[0], self.chunkwise_conv_scale[1]  # (C, k)
        pos = torch.arange(t, device=lengths.device).unsqueeze(0)  # (1, t)
        rows = lengths.unsqueeze(1)
        inside = pos < rows
        scale = torch.ones(lengths.shape[0], t, left_w.shape[0], device=left_w.device,
                           dtype=left_w.dtype)
        li = pos.clamp_max(k - 1).expand_as(scale[..., 0])
        lmask = (pos < k) & inside
        scale = scale + torch.where(lmask[..., None], left_w.t()[li], scale.new_zeros(()))
        ri = pos - rows + k  # the position in right_w that lands on this frame
        rmask = (ri >= 0) & (ri < k) & inside
        scale = scale + torch.where(rmask[..., None], right_w.t()[ri.clamp(0, k - 1)],
                                    scale.new_zeros(()))
        return scale

    def streaming_forward(self, x: torch.Tensor, cache: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk (B, T, C) after ``cache`` (B, kernel // 2, C), its left context."""
        t = x.shape[1]
        x = torch.cat([cache, x], dim=1)
        new_cache = x[:, -(self.kernel_size // 2):]
        causal = self.causal_conv(x)
        xc = self.chunkwise_conv(x[:, self.kernel_size // 2:]) * self.chunk_scale(t).t()
        return xc + causal, new_cache


class ConvolutionModule(nn.Module):
    """in_proj -> x * sigmoid(gate) -> depthwise conv -> out_proj(SwooshR(.))."""

    def __init__(self, channels: int, kernel_size: int, causal: bool) -> None:
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"cnn_module_kernel must be odd, got {kernel_size}")
        self.causal = causal
        self.in_proj = Linear(channels, 2 * channels)
        self.sigmoid = Sigmoid()
        self.depthwise_conv = (
            ChunkCausalDepthwiseConv1d(channels, kernel_size) if causal
            else Conv1d(channels, channels, kernel_size, padding=kernel_size // 2,
                        groups=channels))
        self.out_proj = Linear(channels, channels)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                chunk_size: int = -1) -> torch.Tensor:
        x, s = self.in_proj(x).chunk(2, dim=2)
        x = (x * self.sigmoid(s)).transpose(0, 1)  # (B, T, C): the convs' layout
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask.unsqueeze(-1), 0.0)
        if self.causal:
            lengths = None if key_padding_mask is None else (~key_padding_mask).sum(dim=1)
            x = self.depthwise_conv(x, chunk_size=chunk_size, lengths=lengths)
        else:
            x = self.depthwise_conv(x)
        return self.out_proj(swoosh_r(x.transpose(0, 1)))

    def streaming_forward(self, x: torch.Tensor, cache: torch.Tensor,
                          key_padding_mask: torch.Tensor | None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """A chunk (T, B, C) of a causal module; ``cache`` (B, kernel // 2, C)."""
        x, s = self.in_proj(x).chunk(2, dim=2)
        x = (x * self.sigmoid(s)).transpose(0, 1)
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask.unsqueeze(-1), 0.0)
        x, cache = self.depthwise_conv.streaming_forward(x, cache)
        return self.out_proj(swoosh_r(x.transpose(0, 1))), cache


class Bypass(nn.Module):
    """src_orig + (src - src_orig) * bypass_scale (per channel)."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.bypass_scale = nn.Parameter(torch.full((embed_dim,), 0.5))

    def forward(self, src_orig: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return src_orig + (src - src_orig) * self.bypass_scale


class SimpleDownsample(nn.Module):
    """(T, B, C) -> (ceil(T / ds), B, C): a softmax-weighted sum of each ds frames (the last
    frame repeated to fill the final group)."""

    def __init__(self, downsample: int) -> None:
        super().__init__()
        self.downsample = downsample
        self.bias = nn.Parameter(torch.zeros(downsample))

    def forward(self, src: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``lengths`` (B,): each row's frames; those at or past it read as the row's last frame,
        so a row's groups are what they are when the row runs alone (whatever fills the batch)."""
        t, b, c = src.shape
        ds = self.downsample
        if lengths is not None:
            last = (lengths.to(src.device) - 1).clamp_min(0)
            index = torch.minimum(torch.arange(t, device=src.device).unsqueeze(1), last)
            src = src.gather(0, index.unsqueeze(-1).expand(t, b, c))
        d = (t + ds - 1) // ds
        src = torch.cat((src, src[t - 1:].expand(d * ds - t, b, c)), dim=0)
        weights = self.bias.softmax(dim=0).reshape(1, ds, 1, 1)
        return (src.reshape(d, ds, b, c) * weights).sum(dim=1)


def upsample(src: torch.Tensor, factor: int) -> torch.Tensor:
    """(T, B, C) -> (T * factor, B, C), each frame repeated."""
    t, b, c = src.shape
    return src.unsqueeze(1).expand(t, factor, b, c).reshape(t * factor, b, c)


def convert_num_channels(x: torch.Tensor, channels: int) -> torch.Tensor:
    """Truncate or zero-pad the last dim to ``channels``."""
    if channels <= x.shape[-1]:
        return x[..., :channels]
    return F.pad(x, (0, channels - x.shape[-1]))
