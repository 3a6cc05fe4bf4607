"""Where decoder KV lives (``dense`` / ``paged``) and how many rows it admits.

A decoder declares its per-row KV geometry (``DecoderCacheSpec``), the cross-attention half
included: at Whisper large-v3 the encoder window's K/V is ~245 MB of a ~320 MB row, so a
budget that left it out would admit rows by a fraction of their size.

``DecoderKvBudget`` answers admission (``admit_limit``) and, for paged storage, owns the
engine's one ``BlockPool``:

* paged: the pool *is* the budget. ``decode_kv_budget_gib`` sizes it; without one it holds
  ``max_rows`` (``max_decode_slots``) whole rows, capped on CUDA at ``AUTO_POOL_FRACTION`` of
  the device memory free when the engine is built. A row reserves its whole position budget at
  admission, so ``admit_limit`` is the free blocks over a row's blocks.
* dense: with a budget, rows held by decode groups (idle finished rows included, until their
  group compacts) times a row's bytes; without one, no limit. The headroom of a merge's
  doubling store (``decoder_state.append_rows``) is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from oasr.cache.paged import BlockPool

KV_STORAGE_KINDS = ("auto", "dense", "paged")
AUTO_POOL_FRACTION = 0.5


@dataclass(frozen=True)
class DecoderCacheSpec:
    """Per-row decoder KV geometry: ``layers`` x (K, V) x ``kv_heads`` x ``head_dim`` per
    position, plus ``cross_len`` cross-attention keys per row (0 for a decoder-only model)."""

    layers: int
    kv_heads: int
    head_dim: int
    cross_len: int = 0

    def position_bytes(self, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * self.layers * self.kv_heads * self.head_dim * elem

    def row_bytes(self, positions: int, dtype: torch.dtype) -> int:
        """Dense bytes of one row reserving ``positions`` self-attention positions."""
        return (positions + self.cross_len) * self.position_bytes(dtype)


def resolve_kv_storage(requested: str, *, cuda: bool, greedy: bool, graphs: bool) -> str:
    """``dense`` or ``paged`` for ``requested`` (``auto`` | ``dense`` | ``paged``).

    Beam search is dense (its select repeats rows); naming ``paged`` with it is refused.
    ``auto`` pages exactly when decoder steps will be captured (CUDA, graphs on, a decoder
    that supports them): paging alone is the block-table indirection without the capture it
    pays for.
    """
    if requested not in KV_STORAGE_KINDS:
        raise ValueError(f"unknown kv_storage {requested!r}; valid: {', '.join(KV_STORAGE_KINDS)}")
    if not greedy:
        if requested == "paged":
            # A beam select repeats rows; a paged row's pages are its own, so it would alias.
            raise ValueError("kv_storage='paged' cannot serve beam search (beam_size > 1): a "
                             "beam grid repeats rows, and paged rows own their pages. Use "
                             "kv_storage=auto or dense, or beam_size=1")
        return "dense"
    if requested == "auto":
        return "paged" if cuda and graphs else "dense"
    return requested


class DecoderKvBudget:
    """Admission by decoder-KV bytes; the ``BlockPool`` of paged storage.

    Args:
        spec: the decoder's geometry.
        storage: ``"dense"`` or ``"paged"`` (resolved).
        row_positions: self-attention positions a row may reserve (prompt + new tokens).
        budget_gib: the KV budget (self + cross) in GiB; 0 for none.
        block_size: positions per block (paged).
        max_rows: rows the engine may decode at once (sizes a pool without a budget).
        device, dtype: where the KV lives.
    """

    def __init__(self, spec: DecoderCacheSpec, storage: str, row_positions: int, *,
                 budget_gib: float = 0.0, block_size: int = 16, max_rows: int = 256,
                 device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        if storage not in ("dense", "paged"):
            raise ValueError(f"storage must be resolved to dense or paged, got {storage!r}")
        if budget_gib < 0:
            raise ValueError(f"decode_kv_budget_gib must be >= 0, got {budget_gib}")
        self.spec = spec
        self.storage = storage
        self.row_positions = row_positions
        self.block_size = block_size
        self.device = torch.device(device)
        self.dtype = dtype
        self.budget_bytes = int(budget_gib * 2**30) if budget_gib > 0 else None
        self._pool: BlockPool | None = None
        if storage == "paged":
            self.block_bytes = block_size * spec.position_bytes(dtype)
            self.row_blocks = (math.ceil(row_positions / block_size)
                               + math.ceil(spec.cross_len / block_size))
            self.row_bytes = self.row_blocks * self.block_bytes
            self.num_blocks = self._plan_blocks(max_rows)
            fits = (self.num_blocks - 1) // self.row_blocks
        else:
            self.row_bytes = spec.row_bytes(row_positions, dtype)
            fits = None if self.budget_bytes is None else self.budget_bytes // self.row_bytes
        if fits is not None and fits < 1:
            raise ValueError(
                f"the decoder KV budget holds no row: one row takes {self.row_bytes / 2**30:.4g} "
                f"GiB ({storage}, self + cross); raise decode_kv_budget_gib"
            )

    def _plan_blocks(self, max_rows: int) -> int:
        if self.budget_bytes is not None:
            return self.budget_bytes // self.block_bytes
        want = max_rows * self.row_blocks + 1  # + the null block
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            want = min(want, int(AUTO_POOL_FRACTION * free) // self.block_bytes)
        return want

    @property
    def pool(self) -> BlockPool:
        """The engine's pool, allocated (zeroed) on first use and kept for the process."""
        if self.storage != "paged":
            raise RuntimeError("dense decoder KV has no block pool")
        if self._pool is None:
            s = self.spec
            self._pool = BlockPool(s.layers, self.num_blocks, self.block_size, s.kv_heads,
                                   s.head_dim, self.device, self.dtype)
        return self._pool

    def admit_limit(self, held_rows: int) -> int | None:
        """Rows that may be admitted now (``None``: no limit). ``held_rows``: rows whose dense
        storage decode groups hold (ignored when paged: the pool's free list says)."""
        if self.storage == "paged":
            free = self._pool.free_blocks if self._pool is not None else self.num_blocks - 1
            return free // self.row_blocks
        if self.budget_bytes is None:
            return None
        return max(0, self.budget_bytes // self.row_bytes - held_rows)
