"""Attention compute over projected, head-split q/k/v; the projections stay on the model.

A key window per row is given as two length vectors rather than a mask: ``kv_lens`` (keys at
index >= len are masked: right padding, or a KV cache's filled extent) and ``kv_starts`` (keys
at index < start are masked: left padding). A fused kernel reads them directly; the torch
path materializes a boolean mask only when something is masked.

Causal attention is aligned at the end, as with a KV cache: with Tq queries over Tk keys,
query i sees keys ``j <= i + (Tk - Tq)``. A single query (Tq == 1) therefore sees every key.

A query row with no visible key returns exactly zeros on every path: the torch path lets SDPA
compute such rows however its backend does (NaN or zeros) and then overwrites them with zeros.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.ops import gaps

__all__ = ["Attention"]


def _key_window(
    tk: int, kv_lens: torch.Tensor | None, kv_starts: torch.Tensor | None, device: torch.device
) -> torch.Tensor:
    """Keep-mask (B, 1, 1, Tk) from the per-row window [kv_starts, kv_lens)."""
    idx = torch.arange(tk, device=device)
    keep = None
    if kv_lens is not None:
        keep = idx < kv_lens.to(device).reshape(-1, 1)
    if kv_starts is not None:
        after = idx >= kv_starts.to(device).reshape(-1, 1)
        keep = after if keep is None else keep & after
    assert keep is not None
    return keep[:, None, None, :]


def _causal_keep(tq: int, tk: int, device: torch.device) -> torch.Tensor:
    """End-aligned causal keep-mask (Tq, Tk): query i sees keys j <= i + (Tk - Tq)."""
    qi = torch.arange(tq, device=device).unsqueeze(1)
    kj = torch.arange(tk, device=device).unsqueeze(0)
    return kj <= qi + (tk - tq)


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H_kv, T, D) -> (B, H_kv * groups, T, D), head h reading kv head h // groups."""
    b, hkv, t, d = x.shape
    return x[:, :, None].expand(b, hkv, groups, t, d).reshape(b, hkv * groups, t, d)


class Attention(nn.Module):
    """Scaled dot-product attention. q: (B, H, Tq, D), k/v: (B, H_kv, Tk, D) -> (B, H, Tq, D).

    ``H % H_kv == 0`` (grouped-query attention: query head h reads kv head
    ``h // (H // H_kv)``). ``scale`` defaults to ``1 / sqrt(head_dim)``.
    """

    op = "attention"

    def __init__(
        self, num_heads: int, head_dim: int, scale: float | None = None, causal: bool = False
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
        self.causal = causal

    def _check(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError("q, k, v must be 4-D (B, H, T, D)")
        b, h, _, d = q.shape
        if h != self.num_heads or d != self.head_dim:
            raise ValueError(
                f"q has {h} heads of dim {d}; this Attention has {self.num_heads} of dim "
                f"{self.head_dim}"
            )
        if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d or h % k.shape[1]:
            raise ValueError(
                f"k {tuple(k.shape)} / v {tuple(v.shape)} do not match q {tuple(q.shape)}: "
                "need equal (B, H_kv, Tk, D) with num_heads % H_kv == 0"
            )

    def forward_native(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_lens: torch.Tensor | None = None,
        kv_starts: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self._check(q, k, v)
        tq, tk = q.shape[2], k.shape[2]
        groups = q.shape[1] // k.shape[1]
        causal = self.causal and tq > 1

        unmasked = kv_lens is None and kv_starts is None and attn_mask is None
        # SDPA's is_causal is start-aligned, which equals end-aligned only when Tq == Tk.
        if unmasked and (not causal or tq == tk):
            # No mask: flash can broadcast kv heads itself.
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=self.scale, enable_gqa=groups > 1
            )

        keep: torch.Tensor | None = None  # bool, True = attend
        if kv_lens is not None or kv_starts is not None:
            keep = _key_window(tk, kv_lens, kv_starts, q.device)
        if causal:
            c = _causal_keep(tq, tk, q.device)
            keep = c if keep is None else keep & c
        mask: torch.Tensor
        if attn_mask is None:
            assert keep is not None
            mask = keep
        elif attn_mask.dtype == torch.bool:
            mask = attn_mask if keep is None else keep & attn_mask
        else:
            add = attn_mask.to(q.dtype)
            mask = add if keep is None else torch.where(keep, add, float("-inf"))
        row_open = mask.any(-1, keepdim=True) if mask.dtype == torch.bool else (
            (mask != float("-inf")).any(-1, keepdim=True)
        )

        if groups > 1:
            # With a mask, enable_gqa would send SDPA to its math backend; expanded kv keeps
            # the memory-efficient one.
            k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return out.masked_fill(~row_open, 0.0)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_lens: torch.Tensor | None = None,
        kv_starts: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Args:
            q: (B, H, Tq, D); k, v: (B, H_kv, Tk, D).
            kv_lens: (B,) int, number of valid keys per row (keys >= len are masked).
            kv_starts: (B,) int, first valid key per row (keys < start are masked).
            attn_mask: bool (True = attend) or additive float (-inf = masked), broadcastable
                to (B, H, Tq, Tk); combined with the window and causal masks.

        Returns:
            (B, H, Tq, D); rows with no visible key are zeros.
        """
        kernel = ops.route(self.op, gaps.FMHA.id).select(q, k, v)
        if kernel is not None:
            self._check(q, k, v)
            return kernel(q, k, v, kv_lens, kv_starts, attn_mask, self.scale, self.causal)
        return self.forward_native(q, k, v, kv_lens, kv_starts, attn_mask)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, scale={self.scale:.6g}, "
            f"causal={self.causal}"
        )
