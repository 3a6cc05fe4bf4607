"""Rotary position embeddings in the Neox / HF layout (Qwen2): dimension ``i`` pairs with
``i + D/2`` (the "rotate half" convention).

``NeoxRotaryEmbedding`` turns per-row positions (B, T) or (T,) into ``(cos, sin)`` of shape
(B, T, D) / (T, D); ``apply_rotary_pos_emb`` rotates q and k. The rotation is the routed op
(gap ``rotary``). The position module is not routed: its input is an integer position tensor
that no kernel scope applies to, and the table it produces is computed once per forward and
shared by every layer. Its frequency table is a derived buffer, not checkpoint state
(``persistent=False``), and stays fp32 when the model is cast to half precision: it holds
angles, and a bf16 angle misplaces every rotation.

Kernel contract (gap ``rotary``); the kernel may not modify its inputs:

===================  ===================================================================
``rotary_neox``      ``fn(q, k, cos, sin, unsqueeze_dim) -> (q_embed, k_embed)``
===================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from oasr import ops
from oasr.ops import gaps

ROPE_BASE = 10000.0  # the RoPE paper's base; Qwen2 and WeNet configs set their own


def _check_head_dim(head_dim: int) -> None:
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"rotary head_dim must be positive and even, got {head_dim}")


def rotary_inv_freq(head_dim: int, base: float = ROPE_BASE,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """``base ** (-2i / head_dim)`` for i in [0, head_dim / 2): (D/2,) fp32."""
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return 1.0 / (base ** exponents)


class NeoxRotaryEmbedding(nn.Module):
    """Positions -> ``(cos, sin)`` for the rotate-half convention, as HF's default rotary.

    positions: (B, T) or (T,) integer -> cos, sin: (B, T, head_dim) or (T, head_dim), with
    ``cos[..., i] == cos[..., i + D/2]``. Computed in fp32, returned in ``dtype``.
    ``max_position`` is the trained context; larger positions are computed all the same.
    """

    def __init__(self, head_dim: int, max_position: int = 2048, base: float = ROPE_BASE,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        self.head_dim = head_dim
        self.max_position = max_position
        self.base = base
        self.register_buffer("inv_freq", rotary_inv_freq(head_dim, base, device),
                             persistent=False)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True):  # type: ignore[override]
        # Keeps the fp32 table fp32 through .to(dtype) / .half(): run the conversion (for the
        # device), then rebuild the table where it now lives.
        out = super()._apply(fn, recurse)
        self.inv_freq = rotary_inv_freq(self.head_dim, self.base, self.inv_freq.device)
        return out

    def forward(
        self, positions: torch.Tensor, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.to(torch.float32)[..., None] * self.inv_freq  # (..., T, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (..., T, D)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_position={self.max_position}, base={self.base}"


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last axis."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _neox_native(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 unsqueeze_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def apply_rotary_pos_emb(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k by ``(cos, sin)`` (rotate-half convention), routed.

    q: (B, Hq, T, D), k: (B, Hk, T, D) with cos, sin: (B, T, D) and ``unsqueeze_dim=1``; for
    (B, T, H, D) inputs pass ``unsqueeze_dim=2``. Returns new tensors, dtype promoted as
    ``q * cos`` promotes.
    """
    kernel = ops.route("rotary_neox", gaps.ROTARY.id).select(q, k)
    if kernel is not None:
        return kernel(q, k, cos, sin, unsqueeze_dim)
    return _neox_native(q, k, cos, sin, unsqueeze_dim)
