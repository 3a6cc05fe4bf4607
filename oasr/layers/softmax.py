"""Softmax over attention scores a model forms itself: an additive bias and two boolean masks.

For attentions that cannot use ``Attention`` (relative-position forms that build their own
scores). Both masks use True = keep and broadcast against the scores, so a key-padding mask
(B, 1, 1, Tk) and a chunk/causal mask (1, 1, Tq, Tk) combine without materializing their
product. A row with every position masked returns zeros, not NaN, on every path.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr import ops
from oasr.ops import gaps

__all__ = ["MaskedSoftmax", "masked_softmax", "masked_softmax_native"]


def _check_mask(mask: torch.Tensor | None, name: str) -> None:
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a bool tensor (True = keep), got {mask.dtype}; pass additive "
            "masks as bias"
        )


def masked_softmax_native(
    scores: torch.Tensor,
    bias: torch.Tensor | None = None,
    mask_a: torch.Tensor | None = None,
    mask_b: torch.Tensor | None = None,
    dim: int = -1,
) -> torch.Tensor:
    """The torch path of :func:`masked_softmax`."""
    s = scores if bias is None else scores + bias
    if mask_a is None and mask_b is None:
        return torch.softmax(s, dim=dim)
    if mask_a is None or mask_b is None:
        keep = mask_a if mask_b is None else mask_b
    else:
        keep = mask_a & mask_b
    drop = ~keep
    probs = torch.softmax(s.masked_fill(drop, float("-inf")), dim=dim)
    # Kept rows already hold exact zeros at dropped positions; a fully dropped row is NaN
    # (0/0) and becomes zeros here.
    return probs.masked_fill(drop, 0.0)


def masked_softmax(
    scores: torch.Tensor,
    bias: torch.Tensor | None = None,
    mask_a: torch.Tensor | None = None,
    mask_b: torch.Tensor | None = None,
    dim: int = -1,
) -> torch.Tensor:
    """``softmax(scores + bias)`` over ``dim`` with positions outside ``mask_a & mask_b`` zeroed.

    Args:
        scores: (..., Tk) attention logits, e.g. (B, H, Tq, Tk).
        bias: additive term broadcastable to ``scores`` (a relative-position score), finite.
        mask_a, mask_b: bool, broadcastable to ``scores``, True = keep. Either may be None.
        dim: the softmax axis.

    Returns:
        probabilities shaped like ``scores``; rows with no kept position are all zeros.
    """
    _check_mask(mask_a, "mask_a")
    _check_mask(mask_b, "mask_b")
    kernel = ops.route("masked_softmax", gaps.MASKED_SOFTMAX.id).select(scores)
    if kernel is not None:
        return kernel(scores, bias, mask_a, mask_b, dim)
    return masked_softmax_native(scores, bias, mask_a, mask_b, dim)


class MaskedSoftmax(nn.Module):
    """Module form of :func:`masked_softmax` over a fixed axis. Shapes as there."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward_native(
        self,
        scores: torch.Tensor,
        bias: torch.Tensor | None = None,
        mask_a: torch.Tensor | None = None,
        mask_b: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return masked_softmax_native(scores, bias, mask_a, mask_b, self.dim)

    def forward(
        self,
        scores: torch.Tensor,
        bias: torch.Tensor | None = None,
        mask_a: torch.Tensor | None = None,
        mask_b: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return masked_softmax(scores, bias, mask_a, mask_b, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
