"""Zipformer's front end: three Conv2d + SwooshR, a ConvNeXt block, a projection, BiasNorm.

(B, T, F) features -> (B, (T - 7) // 2, C). icefall's ``conv`` Sequential interleaves
training-only modules (ScaleGrad, Balancers), so its convolutions ``conv.{0,4,7}`` are our
``conv{1,2,3}`` (``converters.py``); ``convnext.*``, ``out``, ``out_norm`` keep their names.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers.activation import SwooshL, SwooshR
from oasr.layers.conv import Conv2d
from oasr.layers.linear import Linear
from oasr.layers.norm import BiasNorm


class ConvNeXt(nn.Module):
    """x + pw2(SwooshL(pw1(depthwise 7x7 (x)))) on NHWC (B, T, F, C)."""

    def __init__(self, channels: int, hidden_ratio: int = 3, kernel: int = 7) -> None:
        super().__init__()
        self.padding = (kernel - 1) // 2
        hidden = channels * hidden_ratio
        self.depthwise_conv = Conv2d(channels, channels, kernel, padding=self.padding,
                                     groups=channels)
        self.pointwise_conv1 = Conv2d(channels, hidden, 1)
        self.activation = SwooshL()
        self.pointwise_conv2 = Conv2d(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pointwise_conv2(self.activation(self.pointwise_conv1(self.depthwise_conv(x))))
        return x + y

    def streaming_forward(self, x: torch.Tensor, cache: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T + pad, F, C): T frames plus ``pad`` of look-ahead; ``cache`` (B, pad, F, C)
        the frames before. -> (B, T, F, C) and the new cache."""
        pad = self.padding
        t = x.shape[1] - pad
        bypass = x[:, :t]
        x = torch.cat([cache, x], dim=1)
        cache = x[:, t:t + pad]
        # The module pads time too; its outputs pad..pad+t read only real frames.
        y = self.depthwise_conv(x)[:, pad:pad + t]
        return bypass + self.pointwise_conv2(self.activation(self.pointwise_conv1(y))), cache


class Conv2dSubsampling(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, layer1_channels: int = 8,
                 layer2_channels: int = 32, layer3_channels: int = 128) -> None:
        super().__init__()
        if in_channels < 7:
            raise ValueError(f"Conv2dSubsampling needs >= 7 feature bins, got {in_channels}")
        self.conv1 = Conv2d(1, layer1_channels, 3, padding=(0, 1))
        self.conv2 = Conv2d(layer1_channels, layer2_channels, 3, stride=2)
        self.conv3 = Conv2d(layer2_channels, layer3_channels, 3, stride=(1, 2))
        self.act = SwooshR()
        self.convnext = ConvNeXt(layer3_channels)
        self.out_width = out_width = (((in_channels - 1) // 2) - 1) // 2
        self.out = Linear(out_width * layer3_channels, out_channels)
        self.out_norm = BiasNorm(out_channels)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, F), lengths (B,) -> (B, (T - 7) // 2, C), (lengths - 7) // 2."""
        x = self.act(self.conv1(x.unsqueeze(-1)))  # NHWC: (B, T, F, 1) -> (B, T', F', C)
        x = self.act(self.conv3(self.act(self.conv2(x))))
        out_lens = torch.div(lengths - 7, 2, rounding_mode="floor")
        # The ConvNeXt reads 3 frames ahead: past a row's end it reads zeros, as with the row
        # alone (its padding), never what another row's length left in the batch.
        valid = torch.arange(x.shape[1], device=x.device) < out_lens.to(x.device).unsqueeze(1)
        x = self.convnext(x * valid[:, :, None, None].to(x.dtype))
        b, t, f, c = x.shape
        # icefall flattens channel-major: (C, F) per frame
        x = self.out_norm(self.out(x.transpose(2, 3).reshape(b, t, c * f)))
        return x, out_lens

    def init_state(self, batch: int, device: torch.device,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The ConvNeXt's zeroed left context: (B, pad, F', C)."""
        c = self.convnext
        return torch.zeros(batch, c.padding, self.out_width, c.depthwise_conv.weight.shape[0],
                           device=device, dtype=dtype)

    def streaming_forward(self, x: torch.Tensor, lengths: torch.Tensor, cache: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A chunk of features (B, T, F) -> (B, (T - 7) // 2 - pad, C), its lengths and the
        new ConvNeXt cache: the last ``pad`` subsampled frames are the ConvNeXt's look-ahead
        and come out with the next chunk."""
        x = self.act(self.conv1(x.unsqueeze(-1)))
        x = self.act(self.conv3(self.act(self.conv2(x))))
        x, cache = self.convnext.streaming_forward(x, cache)
        b, t, f, c = x.shape
        x = self.out_norm(self.out(x.transpose(2, 3).reshape(b, t, c * f)))
        pad = self.convnext.padding
        return x, torch.div(lengths - 7, 2, rounding_mode="floor") - pad, cache
