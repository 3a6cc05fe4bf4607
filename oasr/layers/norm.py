"""Normalization: LayerNorm, RMSNorm and Zipformer's BiasNorm.

Parameters keep their upstream names (``weight``, ``bias``; BiasNorm's ``bias``, ``log_scale``)
so checkpoints load without renaming. Every norm works over the last axis of (..., C) except
BiasNorm, which takes icefall's ``channel_dim``.

Kernel contract (gap ``norm``); outputs are new tensors of ``x``'s dtype unless noted:

==================  ====================================================================
``layer_norm``      ``fn(x, weight | None, bias | None, eps) -> y``
``rms_norm``        ``fn(x, weight, eps) -> y`` (dtype as ``weight * x``)
``bias_norm``       ``fn(x, bias, log_scale, channel_dim) -> y``
==================  ====================================================================
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.ops import gaps

# The eps conventions met in checkpoints; pass the one the checkpoint was trained with.
TORCH_EPS = 1e-5  # torch.nn.LayerNorm, WeNet, HF Whisper
ESPNET_EPS = 1e-12  # ESPnet's LayerNorm
QWEN2_RMS_EPS = 1e-6  # HF Qwen2 rms_norm_eps


class _LastAxisNorm(nn.Module):
    """A last-axis norm whose ``forward`` routes ``op`` and falls back to ``_norm_native``."""

    op: str = ""

    def _norm_native(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _kernel_args(self) -> tuple[Any, ...]:
        """The arguments after ``x`` that the kernel of ``op`` takes."""
        raise NotImplementedError

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm_native(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.NORM.id).select(x)
        if kernel is not None:
            return kernel(x, *self._kernel_args())
        return self._norm_native(x)


class LayerNorm(_LastAxisNorm):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis. x: (..., C).

    ``torch.nn.LayerNorm(C)``'s state_dict loads unchanged (``weight`` (C,), ``bias`` (C,));
    ``elementwise_affine=False`` has neither, ``bias=False`` has no ``bias``.
    """

    op = "layer_norm"

    def __init__(
        self,
        dim: int,
        eps: float = TORCH_EPS,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.normalized_shape = (dim,)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = nn.Parameter(torch.zeros(dim, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def _norm_native(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def _kernel_args(self) -> tuple[Any, ...]:
        return self.weight, self.bias, self.eps

    def extra_repr(self) -> str:
        return (f"{self.dim}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(_LastAxisNorm):
    """``weight * (x / sqrt(mean(x^2) + eps))`` over the last axis. x: (..., C).

    The statistics and the scaling run in fp32; the normalized value is cast back to the input
    dtype *before* multiplying by ``weight`` (HF Qwen2RMSNorm / T5LayerNorm's order), so the
    output dtype is that of ``weight * x``. Parameter: ``weight`` (C,).
    """

    op = "rms_norm"

    def __init__(
        self,
        dim: int,
        eps: float = QWEN2_RMS_EPS,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def _norm_native(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        inv_rms = torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * (h * inv_rms).to(x.dtype)

    def _kernel_args(self) -> tuple[Any, ...]:
        return self.weight, self.eps

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class BiasNorm(nn.Module):
    """Zipformer's BiasNorm: ``x * exp(log_scale) / rms(x - bias)`` along ``channel_dim``.

    Only the rms subtracts ``bias``; the output scales ``x`` itself. There is no eps (icefall
    has none). Statistics run in fp32 and the result is cast back to ``x``'s dtype.
    Parameters: ``bias`` (C,), ``log_scale`` () — icefall's names. x: (..., C, ...).
    """

    op = "bias_norm"

    def __init__(
        self,
        num_channels: int,
        channel_dim: int = -1,
        log_scale: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_channels = num_channels
        self.channel_dim = channel_dim
        self.bias = nn.Parameter(torch.zeros(num_channels, device=device, dtype=dtype))
        self.log_scale = nn.Parameter(torch.tensor(log_scale, device=device, dtype=dtype))

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.channel_dim % x.dim()
        # (C,) -> (C, 1, ..., 1) so it lines up with channel_dim of x.
        bias = self.bias.to(torch.float32).reshape(-1, *([1] * (x.dim() - 1 - dim)))
        h = x.to(torch.float32)
        inv_rms = torch.rsqrt((h - bias).square().mean(dim=dim, keepdim=True))
        return (h * (inv_rms * self.log_scale.to(torch.float32).exp())).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.NORM.id).select(x)
        if kernel is not None:
            return kernel(x, self.bias, self.log_scale, self.channel_dim)
        return self.forward_native(x)

    def extra_repr(self) -> str:
        return f"{self.num_channels}, channel_dim={self.channel_dim}"
