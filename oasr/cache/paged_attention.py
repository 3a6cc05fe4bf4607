"""Attention over a paged KV cache: queries against the keys a block table names.

Kernel contract (gap ``fmha``; ``cuda-toolchain`` where the kernel cannot be built): op
``paged_attention`` takes
``fn(q, k_cache, v_cache, table, kv_lens, kv_starts, width, scale, causal) -> (B, H, Tq, D)``
with q (B, H, Tq, D), k_cache / v_cache (num_blocks, block_size, H_kv, D), table (B, W) block
ids, and the key window per row ``[kv_starts, kv_lens)`` over the first ``width`` (or all
``W * block_size``) positions of the row's blocks; causal attention is end-aligned at
``width``. Routing sees ``(q, k_cache, v_cache)``.

The torch path gathers the blocks into a dense (B, H_kv, W * block_size, D) view and runs the
layer's own ``Attention.forward_native`` on it, so on a given shape it is the dense attention
exactly; only the extra, masked keys of a bucketed width differ from a dense read.
"""

from __future__ import annotations

import torch

from oasr import ops
from oasr.ops import gaps

OP = "paged_attention"
# The decode-step kernel registers itself when its binding is imported, at the first call.
_ROUTE = ops.route(OP, gaps.FMHA.id, provider="oasr.kernels.paged_attention")


def gather_blocks(cache: torch.Tensor, table: torch.Tensor,
                  width: int | None = None) -> torch.Tensor:
    """cache (N, block_size, H, D), table (B, W) -> (B, H, W * block_size, D) keys in order,
    cut to the first ``width`` positions when given. One ``index_select``; the rest are views."""
    b, w = table.shape
    _, bs, h, d = cache.shape
    x = cache.index_select(0, table.reshape(-1)).view(b, w * bs, h, d).transpose(1, 2)
    return x if width is None else x[:, :, :width]


def paged_attention(attn: torch.nn.Module, q: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, table: torch.Tensor, kv_lens: torch.Tensor | None,
                    kv_starts: torch.Tensor | None = None,
                    width: int | None = None) -> torch.Tensor:
    """``attn`` (an ``oasr.layers.Attention``) over the keys ``table`` names.

    Args:
        q: (B, H, Tq, D).
        k_cache, v_cache: (num_blocks, block_size, H_kv, D), one layer of a ``BlockPool``.
        table: (B, W) block ids per row.
        kv_lens: (B,) keys per row (``None``: every gathered key).
        kv_starts: (B,) first valid key per row, or ``None``.
        width: read only the first ``width`` positions (the causal alignment point).

    Returns:
        (B, H, Tq, D); a row with no visible key is zeros.
    """
    kernel = _ROUTE.select(q, k_cache, v_cache)
    if kernel is not None:
        return kernel(q, k_cache, v_cache, table, kv_lens, kv_starts, width, attn.scale,
                      attn.causal)
    k = gather_blocks(k_cache, table, width)
    v = gather_blocks(v_cache, table, width)
    return attn.forward_native(q, k, v, kv_lens=kv_lens, kv_starts=kv_starts)
