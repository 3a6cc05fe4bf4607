"""Position-wise feed-forward blocks, for upstream layouts that nest them under a name.

``FeedForward`` is WeNet / ESPnet ``PositionwiseFeedForward``: submodules ``w_1`` (dim -> hidden,
with the activation fused as a ``LinearActivation`` epilogue) and ``w_2`` (hidden -> dim), so
the keys ``w_1.weight``, ``w_1.bias``, ``w_2.weight``, ``w_2.bias`` load unchanged. Dropout
is an identity at inference and has no parameters, so it is left out.

``GatedMLP`` is HF Qwen2 / LLaMA's MLP: ``down_proj(act(gate_proj(x)) * up_proj(x))`` with the
same three names. Layouts that keep their projections flat (HF Whisper's ``fc1`` / ``fc2``)
use ``LinearActivation`` + ``Linear`` directly rather than inserting a level into their keys.

Both are compositions of routed layers; each projection routes itself. ``GatedMLP`` also offers
its whole gate/up/activation/multiply to one kernel (gap ``gemm``): op ``gated_mlp`` takes
``fn(x, gate_weight, gate_bias | None, up_weight, up_bias | None, activation) -> (..., hidden)``,
``act(x @ gate_weight^T + gate_bias) * (x @ up_weight^T + up_bias)``; ``down_proj`` runs after.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr import ops
from oasr.layers.linear import (
    ACTIVATIONS,
    ColumnParallelLinear,
    Linear,
    LinearActivation,
    RowParallelLinear,
)
from oasr.ops import gaps

# HF config spellings of the same functions (``hidden_act``).
_ACTIVATION_ALIASES = {"silu": "swish", "gelu_pytorch_tanh": "gelu_tanh"}


def _activation_name(activation: str) -> str:
    name = _ACTIVATION_ALIASES.get(activation, activation)
    if name not in ACTIVATIONS:
        valid = ", ".join((*ACTIVATIONS, *_ACTIVATION_ALIASES))
        raise ValueError(f"unknown activation {activation!r}; valid: {valid}")
    return name


class FeedForward(nn.Module):
    """``w_2(act(w_1(x)))``. x: (..., dim) -> (..., dim).

    Args:
        dim: model width (input and output).
        hidden: inner width.
        activation: ``relu``, ``swish`` (``silu``), exact-erf ``gelu`` or ``gelu_tanh``.
        bias: whether both projections carry a bias.
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        activation: str = "relu",
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.activation = _activation_name(activation)
        self.w_1 = LinearActivation(dim, hidden, self.activation, bias=bias, device=device,
                                    dtype=dtype)
        self.w_2 = Linear(hidden, dim, bias=bias, device=device, dtype=dtype)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2.forward_native(self.w_1.forward_native(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.w_1(x))


class GatedMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))``. x: (..., dim) -> (..., dim).

    ``gate_proj`` is a ``LinearActivation`` so an unfused call still gets the activation in the
    GEMM epilogue; gate/up are column-sharded and down row-sharded under tensor parallelism.

    Args:
        dim: model width (input and output).
        hidden: inner (intermediate) width.
        activation: ``swish`` (``silu``), ``relu``, exact-erf ``gelu`` or ``gelu_tanh``.
        bias: whether the projections carry a bias (Qwen2 / LLaMA: no).
    """

    op = "gated_mlp"

    def __init__(
        self,
        dim: int,
        hidden: int,
        activation: str = "swish",
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.activation = _activation_name(activation)
        self.gate_proj = LinearActivation(dim, hidden, self.activation, bias=bias,
                                          device=device, dtype=dtype)
        self.up_proj = ColumnParallelLinear(dim, hidden, bias=bias, device=device, dtype=dtype)
        self.down_proj = RowParallelLinear(hidden, dim, bias=bias, device=device, dtype=dtype)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        gated = self.gate_proj.forward_native(x) * self.up_proj.forward_native(x)
        return self.down_proj.forward_native(gated)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A quantized gate or up projection owns its weights' format; the float kernel cannot
        # read them, so the projections then run one by one through their quant methods.
        quantized = self.gate_proj.quant_method is not None or self.up_proj.quant_method is not None
        kernel = None if quantized else ops.route(self.op, gaps.GEMM.id).select(x)
        if kernel is not None:
            gated = kernel(x, self.gate_proj.weight, self.gate_proj.bias, self.up_proj.weight,
                           self.up_proj.bias, self.activation)
        else:
            gated = self.gate_proj(x) * self.up_proj(x)
        return self.down_proj(gated)
