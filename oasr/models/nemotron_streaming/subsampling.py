"""The causal 8x subsampling of the cache-aware FastConformer, offline and chunk by chunk.

Each stride-2 stage pads the bin axis ``(k - 1, s - 1)`` and the time axis ``(k - 1, s - 1)``
offline. Streaming, a stage prepends the last ``k - s`` time frames of its previous input
(zeros before the first chunk, plus ``s - 1`` leading zeros on the first chunk so the first
chunk sees the offline left padding) and no right padding. Stage 1 is a full Conv2d from one
channel, later stages depthwise + pointwise; ReLU after stage 1 and every pointwise conv.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.conv import Conv2d
from oasr.layers.linear import Linear
from oasr.models.nemotron_streaming.config import NemotronStreamingConfig

__all__ = ["CausalSubsampling", "causal_subsampled_lengths"]


def causal_subsampled_lengths(lengths: torch.Tensor, cfg: NemotronStreamingConfig
                              ) -> torch.Tensor:
    k, s = cfg.subsampling_kernel, 2
    out = lengths.to(torch.int64)
    for _ in range(cfg.subsampling_stages):
        out = torch.div(out + (k - 1) + (s - 1) - k, s, rounding_mode="floor") + 1
    return out


class CausalSubsampling(nn.Module):
    """``convs``: stage-1 Conv2d, then (depthwise, pointwise) per later stage; ``out`` Linear."""

    def __init__(self, cfg: NemotronStreamingConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c, k = cfg.subsampling_channels, cfg.subsampling_kernel
        self.kernel, self.stride = k, 2
        convs = [Conv2d(1, c, k, stride=2)]
        for _ in range(cfg.subsampling_stages - 1):
            convs.append(Conv2d(c, c, k, stride=2, groups=c))
            convs.append(Conv2d(c, c, 1))
        self.convs = nn.ModuleList(convs)
        self.out = Linear(c * cfg.subsampled_bins, cfg.d_model)

    def _strided(self, i: int) -> bool:
        return i == 0 or i % 2 == 1

    def _bin_pad(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, 0, self.kernel - 1, self.stride - 1))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Offline: feats (B, T, F), lengths (B,) -> (B, T', d_model), (B,) int64."""
        k, s = self.kernel, self.stride
        x = feats.unsqueeze(-1)  # NHWC (B, T, F, 1)
        lens = lengths.to(device=feats.device, dtype=torch.int64)
        x = x * _frame_mask(lens, x.shape[1]).to(x.dtype)
        for i, conv in enumerate(self.convs):
            if self._strided(i):
                x = F.pad(self._bin_pad(x), (0, 0, 0, 0, k - 1, s - 1))
                lens = torch.div(lens + (k - 1) + (s - 1) - k, s, rounding_mode="floor") + 1
            x = conv(x)
            if i % 2 == 0:  # stage 1 and each pointwise conv
                x = torch.relu(x * _frame_mask(lens, x.shape[1]).to(x.dtype))
        return self._flatten(x), lens

    def init_cache(self, batch: int, device: torch.device, dtype: torch.dtype
                   ) -> list[torch.Tensor]:
        """Per strided stage, its last ``k - s`` (bin-padded) input frames: zeros to start,
        with the first chunk's extra ``s - 1`` leading zeros included."""
        k, s = self.kernel, self.stride
        caches, bins, chans = [], self.cfg.num_mel_bins, 1
        for i, conv in enumerate(self.convs):
            if not self._strided(i):
                continue
            padded = bins + (k - 1) + (s - 1)
            caches.append(torch.zeros(batch, k - 1, padded, chans, device=device, dtype=dtype))
            bins = (padded - k) // s + 1
            chans = conv.out_channels
        return caches

    def forward_chunk(self, feats: torch.Tensor, cache: list[torch.Tensor],
                      keep: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One chunk: feats (B, T, F) and ``cache`` -> (B, T', d_model) and the new cache: the
        last ``keep`` input frames of each stage (default ``k - s``, what the next chunk
        reads)."""
        k, s = self.kernel, self.stride
        keep = k - s if keep is None else keep
        x = feats.unsqueeze(-1)
        new_cache, stage = [], 0
        for i, conv in enumerate(self.convs):
            if self._strided(i):
                x = self._bin_pad(x)
                x = torch.cat([cache[stage], x], dim=1)
                new_cache.append(x[:, x.shape[1] - keep:])
                stage += 1
            x = conv(x)
            if i % 2 == 0:
                x = torch.relu(x)
        return self._flatten(x), new_cache

    def _flatten(self, x: torch.Tensor) -> torch.Tensor:
        b, t, f, c = x.shape
        return self.out(x.permute(0, 1, 3, 2).reshape(b, t, c * f))


def _frame_mask(lens: torch.Tensor, frames: int) -> torch.Tensor:
    keep = torch.arange(frames, device=lens.device)[None, :] < lens[:, None]
    return keep[:, :, None, None]
