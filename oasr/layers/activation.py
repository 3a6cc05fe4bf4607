"""Standalone activations: Gelu, Relu, Sigmoid, Tanh, Swish, Zipformer's SwooshL / SwooshR, glu.

Each is a module and, for the ones a model calls inline (``swoosh_l``, ``swoosh_r``), a
routed function running the same ``oasr.ops`` route, so an inline call is counted and honours
``OASR_LAYERS_BACKEND`` exactly as the module does; ``glu`` (models call it inline only) is the
routed function alone. An activation that follows a
projection belongs in ``LinearActivation``'s fused epilogue instead.

Kernel contract (gap ``activation``): op ``gelu``, ``gelu_tanh``, ``relu``, ``sigmoid``,
``tanh``, ``swish``, ``swoosh_l`` and ``swoosh_r`` take ``fn(x) -> y``; op ``glu`` takes
``fn(x, dim) -> y``. ``y`` is a new tensor of ``x``'s dtype and device; ``x`` may be strided.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.ops import gaps

# Zipformer's constants. SwooshR's offset is log(1 + e^-1), so SwooshR(0) = 0; the 0.08 slope
# keeps a gradient on the negative side.
SWOOSH_R_SHIFT, SWOOSH_R_OFFSET = 1.0, 0.313261687
SWOOSH_L_SHIFT, SWOOSH_L_OFFSET = 4.0, 0.035
SWOOSH_SLOPE = 0.08


def _swoosh_native(x: torch.Tensor, shift: float, offset: float) -> torch.Tensor:
    # softplus(z) = log(1 + exp(z)) without overflowing exp for large z. The linear terms go
    # into softplus's own output in place: two fresh tensors instead of five, and on the CPU
    # each fresh large tensor is page-faulted in anew (half the activation's time).
    return F.softplus(x - shift).add_(x, alpha=-SWOOSH_SLOPE).sub_(offset)


def _swoosh_r_native(x: torch.Tensor) -> torch.Tensor:
    return _swoosh_native(x, SWOOSH_R_SHIFT, SWOOSH_R_OFFSET)


def _swoosh_l_native(x: torch.Tensor) -> torch.Tensor:
    return _swoosh_native(x, SWOOSH_L_SHIFT, SWOOSH_L_OFFSET)


def _route(op: str, native: Callable[..., torch.Tensor], x: torch.Tensor,
           *args: object) -> torch.Tensor:
    kernel = ops.route(op, gaps.ACTIVATION.id).select(x)
    if kernel is not None:
        return kernel(x, *args)
    return native(x, *args)


def swoosh_r(x: torch.Tensor) -> torch.Tensor:
    """``log(1 + exp(x - 1)) - 0.08 x - 0.313261687``, routed. x: any shape."""
    return _route("swoosh_r", _swoosh_r_native, x)


def swoosh_l(x: torch.Tensor) -> torch.Tensor:
    """``log(1 + exp(x - 4)) - 0.08 x - 0.035``, routed. x: any shape."""
    return _route("swoosh_l", _swoosh_l_native, x)


def glu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``a * sigmoid(b)`` where ``a, b`` are the halves of ``x`` along ``dim``, routed.

    x: (..., 2C, ...) -> (..., C, ...).
    """
    return _route("glu", F.glu, x, dim)


class _Activation(nn.Module):
    """An elementwise activation: ``forward_native`` is the formula, ``forward`` routes it."""

    op: str = ""

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.ACTIVATION.id).select(x)
        if kernel is not None:
            return kernel(x)
        return self.forward_native(x)


class Gelu(_Activation):
    """GELU: exact ``x * Phi(x)`` (``approximate="none"``) or the tanh approximation.

    The two are distinct ops (``gelu`` / ``gelu_tanh``): a checkpoint trained with one is
    served with that one.
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"unknown gelu approximation {approximate!r}; valid: none, tanh")
        self.approximate = approximate
        self.op = "gelu" if approximate == "none" else "gelu_tanh"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Relu(_Activation):
    """``max(x, 0)``."""

    op = "relu"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)


class Sigmoid(_Activation):
    """``1 / (1 + exp(-x))``."""

    op = "sigmoid"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


class Tanh(_Activation):
    """``tanh(x)``."""

    op = "tanh"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


class Swish(_Activation):
    """Swish / SiLU: ``x * sigmoid(x)`` (the Conformer's activation)."""

    op = "swish"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


class SwooshR(_Activation):
    """Zipformer's SwooshR: ``log(1 + exp(x - 1)) - 0.08 x - 0.313261687``."""

    op = "swoosh_r"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return _swoosh_r_native(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swoosh_r(x)


class SwooshL(_Activation):
    """Zipformer's SwooshL: ``log(1 + exp(x - 4)) - 0.08 x - 0.035``."""

    op = "swoosh_l"

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return _swoosh_l_native(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swoosh_l(x)
