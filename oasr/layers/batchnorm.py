"""Inference-mode BatchNorm1d over the channel-last stream (the Conformer convolution module's).

At inference a batch norm is a fixed per-channel affine map built from the running statistics:
``y = (x - running_mean) / sqrt(running_var + eps) * weight + bias``. It normalizes the last
axis of (..., C), the layout the models keep, so no transpose to torch's (B, C, T) is needed.

Parameters and buffers keep torch's names (``weight``, ``bias``, ``running_mean``,
``running_var``) so an ``nn.BatchNorm1d`` state dict loads unchanged; the training counter
``num_batches_tracked`` means nothing at inference and is accepted and discarded on load.

Kernel contract (gap ``batch-norm``): op ``batch_norm`` takes
``fn(x, running_mean, running_var, weight | None, bias | None, eps) -> y``, ``y`` a new tensor
of ``x``'s dtype and shape.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.ops import gaps

__all__ = ["BatchNorm1d"]


class BatchNorm1d(nn.Module):
    """Running-statistics batch norm over the last axis. x: (..., C) -> (..., C)."""

    op = "batch_norm"

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features, device=device, dtype=dtype))
            self.bias = nn.Parameter(torch.zeros(num_features, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.register_buffer("running_mean", torch.zeros(num_features, device=device, dtype=dtype))
        self.register_buffer("running_var", torch.ones(num_features, device=device, dtype=dtype))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[-1]
        if c != self.num_features:
            raise ValueError(f"BatchNorm1d over {self.num_features} channels got last axis {c}")
        # torch's (N, C) form normalizes per column: the rows are every leading position.
        y = F.batch_norm(
            x.reshape(-1, c), self.running_mean, self.running_var, self.weight, self.bias,
            training=False, momentum=0.0, eps=self.eps,
        )
        return y.reshape(x.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.BATCH_NORM.id).select(x)
        if kernel is not None:
            return kernel(x, self.running_mean, self.running_var, self.weight, self.bias,
                          self.eps)
        return self.forward_native(x)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, affine={self.affine}"
