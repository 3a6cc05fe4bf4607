"""Projections: Linear, the tensor-parallel shaped forms, LinearActivation, PointwiseConv1d.

Parameters keep torch's names (``weight`` (out, in), ``bias`` (out,)) so checkpoints load
without renaming.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.layers.quantizable import QuantizableGemm
from oasr.ops import gaps

ACTIVATIONS = ("relu", "swish", "gelu", "gelu_tanh")


def _activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation is None:
        return y
    if activation == "relu":
        return F.relu(y)
    if activation == "swish":
        return F.silu(y)
    if activation == "gelu":
        return F.gelu(y)  # exact erf form
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")


class Linear(QuantizableGemm):
    """``y = x @ W^T + b`` over the last axis. x: (..., in) -> (..., out)."""

    op = "linear"
    activation: str | None = None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features, device=device, dtype=dtype)
        )
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return _activate(F.linear(x, self.weight, self.bias), self.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant_method is not None:
            return self.quant_method.apply(self, x)
        kernel = ops.route(self.op, gaps.GEMM.id).select(x)
        if kernel is not None:
            return kernel(x, self.weight, self.bias, self.activation)
        return self.forward_native(x)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}{act}"


class TiedLinear(Linear):
    """A bias-free Linear whose weight is another module's ``weight``: a vocabulary projection
    tied to its token embedding. x: (..., in) -> (..., out), ``out, in = tied.weight.shape``.

    It owns no parameter, so a checkpoint holds the weight once, under the embedding's name;
    the call is routed (and quantizable) like any ``Linear``.
    """

    def __init__(self, tied: nn.Module) -> None:
        QuantizableGemm.__init__(self)
        self.out_features, self.in_features = tied.weight.shape
        # Held in a tuple so the module is not registered (and its weight not saved) twice.
        self._tied = (tied,)
        self.register_parameter("bias", None)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        return self._tied[0].weight

    def reset_parameters(self) -> None:
        """Nothing of its own to initialise: the tied module owns the weight."""


class ColumnParallelLinear(Linear):
    """A Linear whose output axis is the tensor-parallel shard axis (QKV, gate/up).

    Single-device today: the shape contract is what matters, so a sharded runtime can split
    ``weight`` along dim 0 without the model changing.
    """

    shard_dim = 0


class RowParallelLinear(Linear):
    """A Linear whose input axis is the tensor-parallel shard axis (output, down)."""

    shard_dim = 1


class LinearActivation(Linear):
    """Linear with a fused activation epilogue: relu, swish, exact-erf gelu or gelu_tanh."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        activation: str,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation


class PointwiseConv1d(Linear):
    """A kernel-size-1 Conv1d over BTC input, stored as a GEMM.

    The checkpoint's Conv1d weight (out, in, 1) loads through ``_load_from_state_dict``, so
    upstream keys need no renaming. x: (B, T, in) -> (B, T, out).
    """

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        key = prefix + "weight"
        w = state_dict.get(key)
        if w is not None and w.dim() == 3 and w.shape[-1] == 1:
            state_dict[key] = w.squeeze(-1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
