"""Convolutions over the residual stream's own layout: BTC Conv1d / DepthwiseConv1d, NHWC Conv2d.

Models keep activations as (B, T, C) (and (B, H, W, C) in 2-D front-ends) so a kernel can run
without transposing the stream. Parameters keep torch's names and layouts (``weight``
(out, in/groups, k) or (out, in/groups, kh, kw), ``bias`` (out,)) so checkpoints load without
renaming. The torch paths transpose to torch's channel-first layout and back; their outputs are
contiguous in the channel-last layout the caller asked for.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.layers.conv_tiles import conv2d_time_tiled
from oasr.layers.linear import ACTIVATIONS, _activate
from oasr.layers.quantizable import QuantizableConv
from oasr.ops import gaps

__all__ = ["Conv1d", "Conv2d", "Conv2dActivation", "DepthwiseConv1d", "glu"]

Padding1d = int | tuple[int, int]
Size2d = int | tuple[int, int]


def glu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Routed GLU (``a * sigmoid(b)`` over the two halves of ``dim``), the gate after a conv.

    Delegates to ``oasr.layers.activation.glu`` so the routing decision lives in one place;
    imported at call time to keep this module free of an import-order dependency.
    """
    from oasr.layers.activation import glu as _glu

    return _glu(x, dim)


def _pad_pair(padding: Padding1d) -> tuple[int, int]:
    """(left, right) from an int (symmetric) or a pair; both must be >= 0."""
    left, right = (padding, padding) if isinstance(padding, int) else tuple(padding)
    if left < 0 or right < 0:
        raise ValueError(f"padding must be >= 0, got {padding!r}")
    return int(left), int(right)


def _pair(v: Size2d, name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {v!r}")
    return int(v[0]), int(v[1])


def _init_conv(weight: nn.Parameter, bias: nn.Parameter | None) -> None:
    """torch's default conv init, so an untrained layer behaves like nn.Conv*d."""
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in = weight.shape[1] * math.prod(weight.shape[2:])
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(bias, -bound, bound)


def _conv1d_btc(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: tuple[int, int],
    dilation: int,
    groups: int,
) -> torch.Tensor:
    """torch conv1d on BTC input. x: (B, T, C_in) -> (B, T', C_out), contiguous."""
    xt = x.transpose(1, 2)  # (B, C_in, T)
    left, right = padding
    if left == right:
        y = F.conv1d(xt, weight, bias, stride, left, dilation, groups)
    else:
        y = F.conv1d(F.pad(xt, (left, right)), weight, bias, stride, 0, dilation, groups)
    return y.transpose(1, 2).contiguous()


class Conv1d(QuantizableConv):
    """Dense or grouped 1-D convolution over time. x: (B, T, in) -> (B, T', out).

    ``padding`` is an int (both sides) or ``(left, right)``; ``(k - 1, 0)`` is a causal conv.
    ``T' = (T + left + right - dilation * (k - 1) - 1) // stride + 1``.
    """

    op = "conv1d"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: Padding1d = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                f"divisible by groups ({groups})"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = _pad_pair(padding)
        self.dilation = dilation
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(
            out_channels, in_channels // groups, kernel_size, device=device, dtype=dtype
        ))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        _init_conv(self.weight, self.bias)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return _conv1d_btc(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant_method is not None:
            return self.quant_method.apply(self, x)
        kernel = ops.route(self.op, gaps.CONV1D.id).select(x)
        if kernel is not None:
            return kernel(
                x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
            )
        return self.forward_native(x)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
            f"groups={self.groups}, bias={self.bias is not None}"
        )


class DepthwiseConv1d(nn.Module):
    """Per-channel 1-D convolution over time with an optional fused masked residual.

    ``forward(x, mask, residual, mask_output)`` computes
    ``y = conv(x * mask) [+ residual] [* mask]``: the mask zeroes padded frames *before* the
    conv so they cannot leak into valid frames through the kernel's reach. An FSMN memory block
    (``(x + conv(x)) * mask`` on a masked x) is ``dw(x, mask, residual=x, mask_output=True)``,
    which for a 0/1 mask equals residual ``x * mask``.

    x: (B, T, C) -> (B, T', C) with ``T' = T + left + right - dilation * (k - 1)``.
    ``weight`` is torch's depthwise layout (C, 1, k); ``bias`` (C,).
    """

    op = "depthwise_conv1d"

    def __init__(
        self,
        channels: int,
        kernel_size: int,
        padding: Padding1d = 0,
        bias: bool = True,
        dilation: int = 1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.channels = channels
        self.kernel_size = kernel_size
        self.padding = _pad_pair(padding)
        self.dilation = dilation
        self.weight = nn.Parameter(
            torch.empty(channels, 1, kernel_size, device=device, dtype=dtype)
        )
        if bias:
            self.bias = nn.Parameter(torch.empty(channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        _init_conv(self.weight, self.bias)

    @staticmethod
    def _mask_btc(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(B, T), (B, T, 1) or (B, 1, T) -> (B, T, 1) in x's dtype."""
        b, t = x.shape[0], x.shape[1]
        if mask.numel() != b * t:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not cover (B, T) = {(b, t)}")
        return mask.reshape(b, t, 1).to(x.dtype)

    def forward_native(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        residual: torch.Tensor | None = None,
        mask_output: bool = False,
    ) -> torch.Tensor:
        m = None if mask is None else self._mask_btc(mask, x)
        xin = x if m is None else x * m
        y = _conv1d_btc(
            xin, self.weight, self.bias, 1, self.padding, self.dilation, self.channels
        )
        if residual is not None:
            y = y + residual
        if mask_output and m is not None:
            y = y * m
        return y

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        residual: torch.Tensor | None = None,
        mask_output: bool = False,
    ) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.CONV1D.id).select(x)
        if kernel is not None:
            return kernel(
                x, self.weight, self.bias, self.padding, self.dilation, mask, residual, mask_output
            )
        return self.forward_native(x, mask, residual, mask_output)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, kernel_size={self.kernel_size}, padding={self.padding}, "
            f"dilation={self.dilation}, bias={self.bias is not None}"
        )


class Conv2d(QuantizableConv):
    """2-D convolution on NHWC input. x: (B, H, W, in) -> (B, H', W', out).

    ``weight`` keeps torch's layout (out, in/groups, kh, kw). Padding is symmetric per axis, as
    in nn.Conv2d.
    """

    op = "conv2d"
    activation: str | None = None

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Size2d,
        stride: Size2d = 1,
        padding: Size2d = 0,
        dilation: Size2d = 1,
        groups: int = 1,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                f"divisible by groups ({groups})"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        self.groups = groups
        self.weight = nn.Parameter(
            torch.empty(
                out_channels, in_channels // groups, *self.kernel_size, device=device, dtype=dtype
            )
        )
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        _init_conv(self.weight, self.bias)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        # An NHWC tensor permuted to NCHW is channels_last memory; torch keeps that format
        # through conv2d, so the permute back is usually already contiguous.
        y = F.conv2d(
            x.permute(0, 3, 1, 2), self.weight, self.bias,
            self.stride, self.padding, self.dilation, self.groups,
        )
        return _activate(y.permute(0, 2, 3, 1), self.activation).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant_method is not None:
            return self.quant_method.apply(self, x)
        kernel = ops.route(self.op, gaps.CONV2D.id).select(x)
        if kernel is not None:
            return kernel(
                x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                self.groups, self.activation,
            )
        if x.is_cuda:
            return self._forward_cuda(x)
        return self.forward_native(x)

    def _forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        """The torch path in shapes cuDNN plans once: a pointwise conv is a GEMM over the
        channels (no convolution plan at all); a grouped one runs by fixed-shape time tiles
        (``conv_tiles``: cuDNN's plan for a depthwise 3x3 costs 0.16-0.18 s per new shape);
        any other as ``forward_native``."""
        if (self.kernel_size == (1, 1) and self.stride == (1, 1) and self.padding == (0, 0)
                and self.groups == 1):
            y = F.linear(x, self.weight[:, :, 0, 0], self.bias)
        elif self.groups > 1:
            y = conv2d_time_tiled(x, self.weight, self.bias, self.stride, self.padding,
                                  self.dilation, self.groups)
        else:
            return self.forward_native(x)
        return _activate(y, self.activation)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
            f"groups={self.groups}, bias={self.bias is not None}{act}"
        )


class Conv2dActivation(Conv2d):
    """Conv2d with a fused activation epilogue (relu, swish, exact-erf gelu or gelu_tanh)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Size2d,
        stride: Size2d = 1,
        padding: Size2d = 0,
        dilation: Size2d = 1,
        groups: int = 1,
        bias: bool = True,
        activation: str = "relu",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            device=device, dtype=dtype,
        )
        self.activation = activation
