"""FastConformer's 8x subsampling: one Conv2d, then depthwise-separable Conv2d stages.

(B, T, F) features -> (B, T / 2^n, d_model). Stage 1 is a full 3x3 stride-2 Conv2d from one
channel, each further stage a depthwise 3x3 stride-2 Conv2d and a pointwise 1x1 Conv2d, ReLU
after stage 1 and after every pointwise conv; the (channels, bins) left are flattened channel
major into one Linear. Frames past a row's length are zeroed after every conv, so a padded row
computes what the row alone computes.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers.conv import Conv2d
from oasr.layers.linear import Linear
from oasr.models.fastconformer.config import FastConformerConfig

__all__ = ["DepthwiseSeparableSubsampling", "subsampled_lengths"]


def subsampled_lengths(lengths: torch.Tensor, cfg: FastConformerConfig) -> torch.Tensor:
    """Valid frames after the stride-2 padded stages: ``(L + 2p - k) // 2 + 1`` per stage."""
    k = cfg.subsampling_kernel
    pad = (k - 1) // 2
    out = lengths.to(torch.int64)
    for _ in range(cfg.subsampling_stages):
        out = torch.div(out + 2 * pad - k, 2, rounding_mode="floor") + 1
    return out


class DepthwiseSeparableSubsampling(nn.Module):
    """``convs`` in order: stage-1 Conv2d, then (depthwise, pointwise) per further stage."""

    def __init__(self, cfg: FastConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c, k = cfg.subsampling_channels, cfg.subsampling_kernel
        pad = (k - 1) // 2
        convs = [Conv2d(1, c, k, stride=2, padding=pad)]
        for _ in range(cfg.subsampling_stages - 1):
            convs.append(Conv2d(c, c, k, stride=2, padding=pad, groups=c))
            convs.append(Conv2d(c, c, 1))
        self.convs = nn.ModuleList(convs)
        self.out = Linear(c * cfg.subsampled_bins, cfg.d_model)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F), lengths (B,) -> (B, T', d_model), (B,) int64."""
        x = feats.unsqueeze(-1)  # NHWC: (B, T, F, 1)
        lens = lengths.to(device=feats.device, dtype=torch.int64)
        x = x * _frame_mask(lens, x.shape[1]).to(x.dtype)
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if conv.stride != (1, 1):
                lens = torch.div(lens + 2 * conv.padding[0] - conv.kernel_size[0],
                                 conv.stride[0], rounding_mode="floor") + 1
            # stage 1 and each pointwise conv are followed by a ReLU; depthwise convs are not
            if i == 0 or i % 2 == 0:
                x = torch.relu(x)
            x = x * _frame_mask(lens, x.shape[1]).to(x.dtype)
        b, t, f, c = x.shape
        return self.out(x.permute(0, 1, 3, 2).reshape(b, t, c * f)), lens


def _frame_mask(lens: torch.Tensor, frames: int) -> torch.Tensor:
    """(B, T, 1, 1) True on valid frames."""
    keep = torch.arange(frames, device=lens.device)[None, :] < lens[:, None]
    return keep[:, :, None, None]
