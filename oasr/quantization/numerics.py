"""The quantization arithmetic every method and lane shares, in plain torch.

Weights: symmetric, one scale per output channel (row of the (N, K) weight), from the row's
largest magnitude (absmax). Activations: symmetric per token (row of the (M, K) input), or, for
torch's dynamic int8 linear, asymmetric uint8 per tensor (``tensor_qparams``).
"""

from __future__ import annotations

import torch

__all__ = [
    "FP8_DTYPE",
    "FP8_MAX",
    "INT8_MAX",
    "dequantize_weight",
    "quantize_rows_fp8",
    "quantize_rows_int8",
    "quantize_weight_fp8",
    "quantize_weight_int8",
    "tensor_qparams",
]

INT8_MAX = 127  # symmetric: -127..127, so a scale maps both signs alike
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
# A row of zeros gets this scale (its values quantize to 0 whatever the scale).
_TINY = 1e-12


def quantize_weight_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float -> int8 (N, K) and fp32 scales (N,), ``weight ~= q * scale[:, None]``."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=_TINY) / INT8_MAX  # (N,)
    q = torch.round(w / scale[:, None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def quantize_weight_fp8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float -> e4m3 (N, K) and fp32 scales (N,), ``weight ~= q * scale[:, None]``."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=_TINY) / FP8_MAX
    q = (w / scale[:, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """int8 / e4m3 (N, K) and scales (N,) -> (N, K) in ``dtype``."""
    return (q.float() * scale.float()[:, None]).to(dtype)


def quantize_rows_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) float -> int8 (M, K) and fp32 scales (M, 1): one symmetric scale per token."""
    xf = x.float()
    scale = torch.linalg.vector_norm(xf, float("inf"), dim=1, keepdim=True)
    scale = scale.clamp_(min=_TINY).div_(INT8_MAX)  # (M, 1)
    q = torch.round(xf / scale).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) float -> e4m3 (M, K) and fp32 scales (M, 1): one scale per token."""
    xf = x.float()
    scale = torch.linalg.vector_norm(xf, float("inf"), dim=1, keepdim=True)
    scale = scale.clamp_(min=_TINY).div_(FP8_MAX)
    q = (xf / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def tensor_qparams(x: torch.Tensor, reduce_range: bool) -> tuple[float, int]:
    """(scale, zero_point) of asymmetric uint8 per-tensor quantization of ``x``, as torch's
    dynamic int8 linear chooses them (the range always holds 0; ``reduce_range``: 7 bits)."""
    scale, zero_point = torch._choose_qparams_per_tensor(x.float().contiguous(), reduce_range)
    return float(scale), int(zero_point)
