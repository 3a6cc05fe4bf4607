"""Routed batched matrix multiply, for models that multiply activations by activations inline."""

from __future__ import annotations

import torch

from oasr import ops
from oasr.ops import gaps

__all__ = ["bmm"]


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` per batch entry. a: (N, M, K), b: (N, K, P) -> (N, M, P).

    Same contract as ``torch.bmm`` (3-D operands, equal batch, same dtype); routed so a kernel
    can serve in-scope calls and ``OASR_LAYERS_BACKEND=torch`` is honoured.
    """
    kernel = ops.route("bmm", gaps.BMM.id).select(a, b)
    if kernel is not None:
        return kernel(a, b)
    return torch.bmm(a, b)
