"""Float64 references shared by the projection and feed-forward tests."""

from __future__ import annotations

import math

import torch

ACT64 = {
    "relu": lambda h: torch.where(h > 0, h, torch.zeros_like(h)),
    "swish": lambda h: h / (1.0 + torch.exp(-h)),
    "gelu": lambda h: 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0))),
    "gelu_tanh": lambda h: 0.5 * h * (
        1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3))
    ),
}


def affine64(x: torch.Tensor, lin: torch.nn.Module) -> torch.Tensor:
    """x @ W^T + b in float64."""
    y = x.double() @ lin.weight.double().t()
    return y if lin.bias is None else y + lin.bias.double()


def strided_inputs(dim: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """A contiguous row, a permuted view and a sliced view, all with last axis ``dim``."""
    g = torch.Generator().manual_seed(dim)
    return [
        torch.randn(1, dim, generator=g).to(dtype),
        torch.randn(dim, 3, 5, generator=g).to(dtype).permute(1, 2, 0),  # strided last axis
        torch.randn(2, 3, 2 * dim, generator=g).to(dtype)[..., 1::2],  # sliced
    ]
