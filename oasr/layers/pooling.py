"""Pooling over time on the BTC residual stream: AvgPool1d."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.ops import gaps

__all__ = ["AvgPool1d"]


class AvgPool1d(nn.Module):
    """Average over windows of ``kernel_size`` frames. x: (B, T, C) -> (B, T', C).

    Arguments mean what they mean in nn.AvgPool1d (``stride`` defaults to ``kernel_size``;
    ``padding`` is symmetric and at most ``kernel_size // 2``); only the layout differs.
    The layer has no parameters.
    """

    op = "avg_pool1d"

    def __init__(
        self,
        kernel_size: int,
        stride: int | None = None,
        padding: int = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        if padding < 0 or padding > kernel_size // 2:
            raise ValueError(
                f"padding must be in [0, kernel_size // 2] = [0, {kernel_size // 2}], "
                f"got {padding}"
            )
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        y = F.avg_pool1d(
            x.transpose(1, 2), self.kernel_size, self.stride, self.padding,
            self.ceil_mode, self.count_include_pad,
        )
        return y.transpose(1, 2).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.AVG_POOL1D.id).select(x)
        if kernel is not None:
            return kernel(
                x, self.kernel_size, self.stride, self.padding,
                self.ceil_mode, self.count_include_pad,
            )
        return self.forward_native(x)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}"
        )
