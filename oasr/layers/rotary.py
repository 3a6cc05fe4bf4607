"""Rotary position embeddings, in the two layouts checkpoints are trained with.

* Neox / HF (``NeoxRotaryEmbedding`` + ``apply_rotary_pos_emb``): dimension ``i`` pairs with
  ``i + D/2`` (the "rotate half" convention). The module turns per-row positions (B, T) or
  (T,) into ``(cos, sin)`` of shape (B, T, D) / (T, D); the function rotates q and k.
* LLaMA-meta / WeNet (``RotaryEmbedding`` + ``apply_rotary_emb``): dimension ``2i`` pairs with
  ``2i + 1``, the pair read as one complex number and multiplied by ``freqs_cis`` (complex64,
  (..., T, D/2)) from ``precompute_freqs_cis``.

The rotation is the routed op (gap ``rotary``). The position modules are not routed: their input
is an integer position tensor that no kernel scope applies to, and the table they produce is
computed once per forward and shared by every layer. Their frequency tables are derived
buffers, not checkpoint state (``persistent=False``), and stay fp32 when the model is cast to
half precision: they are angles, and a bf16 angle misplaces every rotation.

Kernel contract (gap ``rotary``); neither kernel may modify its inputs:

===================  ===================================================================
``rotary_neox``      ``fn(q, k, cos, sin, unsqueeze_dim) -> (q_embed, k_embed)``
``rotary_complex``   ``fn(x, freqs_cis, unsqueeze_dim) -> x_embed`` (dtype of ``x``)
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


def precompute_freqs_cis(dim: int, end: int, theta: float = ROPE_BASE,
                         device: torch.device | str | None = None) -> torch.Tensor:
    """``exp(i * t * theta ** (-2j / dim))`` for t in [0, end): (end, dim / 2) complex64."""
    _check_head_dim(dim)
    inv_freq = rotary_inv_freq(dim, theta, device=device)
    angles = torch.outer(torch.arange(end, device=device, dtype=torch.float32), inv_freq)
    return torch.polar(torch.ones_like(angles), angles)


class _FrequencyTable(nn.Module):
    """Keeps derived fp32 tables fp32 through ``.to(dtype)`` / ``.half()``: ``_apply`` runs the
    conversion (for the device), then rebuilds the tables where they now live."""

    def _rebuild(self, device: torch.device) -> None:
        raise NotImplementedError

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True):  # type: ignore[override]
        out = super()._apply(fn, recurse)
        self._rebuild(next(self.buffers()).device)
        return out


class NeoxRotaryEmbedding(_FrequencyTable):
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

    def _rebuild(self, device: torch.device) -> None:
        self.inv_freq = rotary_inv_freq(self.head_dim, self.base, device)

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


class RotaryEmbedding(_FrequencyTable):
    """Positions -> ``freqs_cis`` for the adjacent-pair complex form (LLaMA-meta, WeNet).

    Holds the (max_position, head_dim / 2) table and gathers rows: positions (T,) or (B, T)
    integer in [0, max_position) -> (T, D/2) or (B, T, D/2) complex64.
    """

    def __init__(self, head_dim: int, max_position: int = 2048, base: float = ROPE_BASE,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        self.head_dim = head_dim
        self.max_position = max_position
        self.base = base
        # Stored as real (..., 2): module dtype conversions would drop a complex imaginary part.
        table = torch.view_as_real(precompute_freqs_cis(head_dim, max_position, base, device))
        self.register_buffer("freqs_cis_real", table, persistent=False)

    def _rebuild(self, device: torch.device) -> None:
        table = precompute_freqs_cis(self.head_dim, self.max_position, self.base, device)
        self.freqs_cis_real = torch.view_as_real(table)

    @property
    def freqs_cis(self) -> torch.Tensor:
        """The whole table: (max_position, head_dim / 2) complex64."""
        return torch.view_as_complex(self.freqs_cis_real)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.freqs_cis[positions]

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_position={self.max_position}, base={self.base}"


def _complex_native(x: torch.Tensor, freqs_cis: torch.Tensor,
                    unsqueeze_dim: int | None) -> torch.Tensor:
    if unsqueeze_dim is not None:
        freqs_cis = freqs_cis.unsqueeze(unsqueeze_dim)
    pairs = x.to(torch.float32).reshape(*x.shape[:-1], -1, 2)
    if pairs.storage_offset() % 2 or any(s % 2 for s in pairs.stride()[:-1]):
        # view_as_complex needs every complex element 8-byte aligned; a view sliced at an
        # odd offset is not, so it is copied.
        pairs = pairs.clone(memory_format=torch.contiguous_format)
    pairs = torch.view_as_complex(pairs)
    return torch.view_as_real(pairs * freqs_cis).flatten(-2).to(x.dtype)


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor,
                     unsqueeze_dim: int | None = -2) -> torch.Tensor:
    """Rotate adjacent pairs ``(x[2i], x[2i+1])`` of x by ``freqs_cis``, routed.

    x: (B, T, H, D) with freqs_cis (T, D/2) or (B, T, D/2) and the default ``unsqueeze_dim=-2``
    (the head axis); for (B, H, T, D) pass ``unsqueeze_dim=None`` with (T, D/2) or ``1`` with
    (B, T, D/2). Computed in fp32, returned in x's dtype.
    """
    kernel = ops.route("rotary_complex", gaps.ROTARY.id).select(x)
    if kernel is not None:
        return kernel(x, freqs_cis, unsqueeze_dim)
    return _complex_native(x, freqs_cis, unsqueeze_dim)
