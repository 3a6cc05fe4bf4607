"""The Conformer front: a Conv2d subsampling stack (4x, 6x, 8x) and the sinusoidal positions.

WeNet's ``Conv2dSubsampling{4,6,8}``: valid (unpadded) ReLU convolutions over (time, freq),
then a linear map of the flattened (channel, freq) plane to ``d_model``. Its relative-position
encoding scales the output by ``sqrt(d_model)`` and hands the attention the plain sinusoidal
table for positions ``0 .. T'-1`` (WeNet dropped the rel-shift, so the table is absolute).

Module names follow WeNet's keys: ``conv.0`` / ``conv.2`` / ``conv.4`` (the ReLUs sat at the odd
indices and are fused into the convs here), ``out.0`` for 4x and ``linear`` for 6x / 8x.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from oasr.layers.conv import Conv2dActivation
from oasr.layers.linear import Linear
from oasr.models.conformer.config import SUBSAMPLING_LAYERS, subsampled_freq

__all__ = ["Conv2dSubsampling", "SinusoidalPositions", "sinusoid_table", "subsampled_lengths"]


def sinusoid_table(length: int, dim: int) -> torch.Tensor:
    """The transformer sinusoid (length, dim), fp32: sin on even columns, cos on odd."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table


class SinusoidalPositions(nn.Module):
    """A cached sinusoid table, grown on demand. ``forward(length) -> (length, dim)``.

    The table is a non-persistent buffer: it is recomputed, never loaded, so it follows the
    model's device and dtype without being a weight.
    """

    def __init__(self, dim: int, max_len: int = 5000) -> None:
        super().__init__()
        self.dim = dim
        self.register_buffer("pe", sinusoid_table(max_len, dim), persistent=False)

    def forward(self, length: int) -> torch.Tensor:
        if length > self.pe.shape[0]:
            # Beyond the precomputed span (long offline audio): extend once, same formula.
            grown = max(length, 2 * self.pe.shape[0])
            self.pe = sinusoid_table(grown, self.dim).to(self.pe.device, self.pe.dtype)
        return self.pe[:length]

    def extra_repr(self) -> str:
        return f"dim={self.dim}, cached={self.pe.shape[0]}"


def subsampled_lengths(lengths: torch.Tensor, input_layer: str) -> torch.Tensor:
    """Valid output frames per row: each valid conv reads only valid input frames. (B,) int64."""
    out = lengths.to(torch.int64)
    for kernel, stride in SUBSAMPLING_LAYERS[input_layer]:
        out = torch.div(out - kernel, stride, rounding_mode="floor") + 1
    return out.clamp_min(0)


class Conv2dSubsampling(nn.Module):
    """Features (B, T, F) -> (B, T', d_model) scaled by sqrt(d_model), plus the positions.

    ``T' = ((T - k1) // s1 + 1 - k2) // s2 + 1 ...`` over the stack's (kernel, stride) pairs.
    """

    def __init__(self, input_dim: int, d_model: int, input_layer: str,
                 max_positions: int = 5000) -> None:
        super().__init__()
        self.input_layer = input_layer
        layers = SUBSAMPLING_LAYERS[input_layer]
        convs: OrderedDict[str, nn.Module] = OrderedDict()
        cin = 1
        for i, (kernel, stride) in enumerate(layers):
            convs[str(2 * i)] = Conv2dActivation(cin, d_model, kernel, stride, activation="relu")
            cin = d_model
        self.conv = nn.Sequential(convs)
        flat = d_model * subsampled_freq(input_layer, input_dim)
        if input_layer == "conv2d":
            self.out = nn.Sequential(OrderedDict([("0", Linear(flat, d_model))]))
        else:
            self.linear = Linear(flat, d_model)
        self.pos_enc = SinusoidalPositions(d_model, max_positions)
        self.xscale = math.sqrt(d_model)
        self.subsampling_rate = math.prod(s for _, s in layers)
        # Input frames a output frame reads beyond its own stride: sum of (k - 1) * rate-so-far.
        context, rate = 0, 1
        for kernel, stride in layers:
            context += (kernel - 1) * rate
            rate *= stride
        self.right_context = context

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, F) -> (hidden (B, T', d_model), positions (T', d_model))."""
        h = self.conv(x.unsqueeze(-1))  # NHWC: (B, T', F', C)
        b, t, f, c = h.shape
        # WeNet flattens channel-major: (C, F') per frame.
        h = h.transpose(2, 3).reshape(b, t, c * f)
        proj = self.out[0] if self.input_layer == "conv2d" else self.linear
        h = proj(h) * self.xscale
        return h, self.pos_enc(t).to(h.dtype)
