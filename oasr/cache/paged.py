"""Paged decoder KV: one persistent ``BlockPool`` per engine, one block table per row.

A row reserves its whole position budget at prefill (self-attention: the group's capacity;
cross-attention: the encoder window), so a step never allocates and a pool cannot run out in
the middle of a request. What paging buys over ``DenseKv``:

* the K/V live at addresses fixed for the process, so a step can be captured in a CUDA graph
  (``oasr/engine/decoder_graph.py``) with only the block tables and lengths as inputs;
* a merge concatenates block tables and a compaction index-selects them: no K/V moves;
* a retiring row's blocks go back to the pool at once (``release_rows``), not at compaction.

Block 0 is the *null block*: never handed out, it pads block tables (rows of a merged group
reserve different widths) and stands in for a released row's blocks. Nothing reads it
unmasked except rows that have already finished, and every value written there is a real
K/V projection, so it stays finite (a masked key multiplies its value by 0, and 0 * inf is
NaN).

Layout: ``pool.k(layer)`` / ``pool.v(layer)`` are (num_blocks, block_size, H, D), so the
blocks of a table gather into (B, W * block_size, H, D) with one ``index_select`` and a view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from oasr.cache.paged_attention import gather_blocks, paged_attention

NULL_BLOCK = 0


class PoolExhausted(RuntimeError):
    """The pool has fewer free blocks than a reservation asked for."""


def bucket_blocks(n: int, width: int) -> int:
    """The table width a step reads for ``n`` needed blocks: the next power of two, capped at
    the table's ``width``. Buckets keep the number of distinct step shapes (graph keys) small;
    the keys past a row's length are masked."""
    if n < 1:
        raise ValueError(f"need at least one block, got {n}")
    return min(1 << (n - 1).bit_length(), width)


class BlockPool:
    """K/V blocks of ``block_size`` positions for every layer, allocated once; a free list.

    Args:
        layers, heads, head_dim: the decoder's KV geometry (``heads``: KV heads).
        num_blocks: blocks in the pool, the null block included (so ``num_blocks - 1`` can be
            handed out).
        block_size: positions per block.
    """

    def __init__(self, layers: int, num_blocks: int, block_size: int, heads: int,
                 head_dim: int, device: torch.device | str, dtype: torch.dtype) -> None:
        if num_blocks < 2:
            raise ValueError(f"a pool needs the null block and at least one more, got "
                             f"{num_blocks} blocks")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.layers = layers
        self.block_size = block_size
        self.heads = heads
        self.head_dim = head_dim
        # Zeroed once: stale values are masked but must be finite.
        self.kv = torch.zeros(2, layers, num_blocks, block_size, heads, head_dim,
                              device=device, dtype=dtype)
        # Popped from the end: a fresh pool hands out 1, 2, 3, ...
        self._free = list(range(num_blocks - 1, NULL_BLOCK, -1))
        self._used: set[int] = set()

    @property
    def device(self) -> torch.device:
        return self.kv.device

    @property
    def dtype(self) -> torch.dtype:
        return self.kv.dtype

    @property
    def num_blocks(self) -> int:
        return self.kv.shape[2]

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return len(self._used)

    def k(self, layer: int) -> torch.Tensor:
        """(num_blocks, block_size, H, D) keys of ``layer``."""
        return self.kv[0, layer]

    def v(self, layer: int) -> torch.Tensor:
        return self.kv[1, layer]

    def blocks_for(self, positions: int) -> int:
        return math.ceil(positions / self.block_size)

    def allocate(self, n: int) -> list[int]:
        """``n`` free block ids; raises ``PoolExhausted`` (taking none) if there are fewer."""
        if n > len(self._free):
            raise PoolExhausted(f"decoder KV pool: {n} blocks asked, {len(self._free)} free of "
                                f"{self.num_blocks - 1}")
        out = [self._free.pop() for _ in range(n)]
        self._used.update(out)
        return out

    def free(self, blocks: list[int]) -> None:
        for b in blocks:
            if b not in self._used:
                raise ValueError(f"block {b} is not allocated (double free or foreign block)")
            self._used.remove(b)
            self._free.append(b)

    def allocate_rows(self, rows: int, positions: int) -> tuple[list[list[int]], torch.Tensor]:
        """Reserve ``positions`` per row for ``rows`` rows, all or nothing.

        Returns:
            the block ids per row (host) and the block table (rows, W) on the pool's device.
        """
        per_row = self.blocks_for(positions)
        if rows * per_row > len(self._free):
            raise PoolExhausted(f"decoder KV pool: {rows} rows x {per_row} blocks asked, "
                                f"{len(self._free)} free of {self.num_blocks - 1}")
        blocks = [self.allocate(per_row) for _ in range(rows)]
        table = torch.tensor(blocks, dtype=torch.long).reshape(rows, per_row).to(self.device)
        return blocks, table


def _pad_width(table: torch.Tensor, width: int) -> torch.Tensor:
    if table.shape[1] == width:
        return table
    pad = table.new_full((table.shape[0], width - table.shape[1]), NULL_BLOCK)
    return torch.cat([table, pad], dim=1)


def _cat_tables(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    w = max(a.shape[1], b.shape[1])
    return torch.cat([_pad_width(a, w), _pad_width(b, w)])


def _scatter(pool: BlockPool, layer: int, table: torch.Tensor, pos: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Store k, v (B, H, S, D) of ``layer`` at positions ``pos`` (S,), the same for every row."""
    bs = pool.block_size
    blk = table[:, pos // bs]  # (B, S)
    off = pos % bs  # (S,) broadcast over rows
    pool.k(layer)[blk, off] = k.transpose(1, 2)
    pool.v(layer)[blk, off] = v.transpose(1, 2)


def _distinct(idx: torch.Tensor) -> list[int]:
    order = idx.tolist()
    if len(set(order)) != len(order):
        raise ValueError("paged decoder KV cannot repeat a row (a row's blocks are its own); "
                         "beam search keeps dense storage")
    return order


@dataclass
class _Paged:
    """What both paged halves share: the pool, a block table per row and the host block ids."""

    pool: BlockPool
    table: torch.Tensor  # (B, W) long block ids, NULL_BLOCK padded
    blocks: list[list[int]] = field(repr=False)  # per row; [] once released

    capturable: ClassVar[bool] = True

    @property
    def batch(self) -> int:
        return self.table.shape[0]

    @property
    def held_blocks(self) -> int:
        return sum(len(b) for b in self.blocks)

    def _release(self, rows: list[int]) -> None:
        freed = [r for r in rows if self.blocks[r]]
        for r in freed:
            self.pool.free(self.blocks[r])
            self.blocks[r] = []
        if freed:
            idx = torch.tensor(freed, device=self.table.device)
            self.table.index_fill_(0, idx, NULL_BLOCK)

    def release_rows(self, rows: list[int]) -> None:
        """Return these rows' blocks to the pool; the rows read and write the null block after."""
        self._release(rows)

    def _take(self, idx: torch.Tensor) -> tuple[torch.Tensor, list[list[int]]]:
        """The table and block ids of rows ``idx`` (distinct); rows left out are released, so
        the state taken from is consumed."""
        order = _distinct(idx)
        keep = set(order)
        self._release([r for r in range(self.batch) if r not in keep])
        return self.table.index_select(0, idx), [self.blocks[i] for i in order]


@dataclass
class PagedKv(_Paged):
    """Self-attention KV of one decode group over a ``BlockPool``; the surface of ``DenseKv``.

    ``lens`` (B,) keys cached per row (the next write index), ``starts`` (B,) left padding or
    ``None``; ``max_len`` a host-side upper bound of ``lens``; ``capacity`` the positions each
    row reserved (the bound ``max_len`` saturates at). ``lens`` is not clamped: only a row
    that has finished steps past its reservation, and its writes land in the null block.
    """

    lens: torch.Tensor = None  # type: ignore[assignment]
    starts: torch.Tensor | None = None
    max_len: int = 0
    capacity: int = 0

    @classmethod
    def allocate(cls, pool: BlockPool, batch: int, capacity: int) -> PagedKv:
        blocks, table = pool.allocate_rows(batch, capacity)
        lens = torch.zeros(batch, dtype=torch.long, device=pool.device)
        return cls(pool, table, blocks, lens, None, 0, capacity)

    def positions(self) -> torch.Tensor:
        return self.lens if self.starts is None else self.lens - self.starts

    def step_blocks(self) -> int:
        """Table columns a one-token step reads (and writes through): ``max_len + 1`` keys,
        bucketed. The same on the eager path and in a captured graph."""
        return bucket_blocks(self.pool.blocks_for(self.max_len + 1), self.table.shape[1])

    def write(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Write (B, H, S, D) new keys at each row's ``lens`` (lens advance in ``advance``)."""
        s = k_new.shape[2]
        if s == 1:
            bs, nb = self.pool.block_size, self.step_blocks()
            # A finished row stepping past its reservation writes into a null-block column.
            pos = self.lens.clamp(max=nb * bs - 1)
            blk = self.table[:, :nb].gather(1, (pos // bs)[:, None])[:, 0]
            off = pos % bs
            self.pool.k(layer)[blk, off] = k_new[:, :, 0]
            self.pool.v(layer)[blk, off] = v_new[:, :, 0]
            return
        if self.max_len + s > self.capacity:
            raise RuntimeError(
                f"decoder KV capacity {self.capacity} exceeded (have {self.max_len}, adding {s})"
            )
        # Prefill: every row starts at the same offset (a fresh group).
        pos = torch.arange(self.max_len, self.max_len + s, device=self.table.device)
        _scatter(self.pool, layer, self.table, pos, k_new, v_new)

    def attend(self, layer: int, attn: torch.nn.Module, q: torch.Tensor) -> torch.Tensor:
        """q (B, H, S, D) over each row's keys, the S new ones included -> (B, H, S, D)."""
        s = q.shape[2]
        if s == 1:
            # One query sees every key in its window, so a bucketed, masked width is exact.
            nb, width = self.step_blocks(), None
        else:
            # Causal attention is end-aligned: read exactly the filled width, as dense does.
            width = self.max_len + s
            nb = self.pool.blocks_for(width)
        return paged_attention(attn, q, self.pool.k(layer), self.pool.v(layer),
                               self.table[:, :nb], self.lens + s, self.starts, width)

    def _advance_host(self, s: int) -> None:
        self.max_len = min(self.max_len + s, self.capacity)

    def advance(self, s: int) -> None:
        self.lens = self.lens + s
        self._advance_host(s)

    def select(self, idx: torch.Tensor) -> PagedKv:
        """Rows ``idx`` (distinct): the tables move, the K/V do not. Rows left out are freed,
        so the state selected from is consumed."""
        table, blocks = self._take(idx)
        return PagedKv(self.pool, table, blocks, self.lens.index_select(0, idx),
                       None if self.starts is None else self.starts.index_select(0, idx),
                       self.max_len, self.capacity)

    def can_merge(self, other: object) -> bool:
        return (isinstance(other, PagedKv) and other.pool is self.pool
                and (self.starts is None) == (other.starts is None))

    def merge(self, other: PagedKv) -> PagedKv:
        """This group's rows then ``other``'s: the block tables concatenate."""
        if not self.can_merge(other):
            raise ValueError("paged KV groups on different pools or paddings cannot merge")
        return PagedKv(
            self.pool, _cat_tables(self.table, other.table), self.blocks + other.blocks,
            torch.cat([self.lens, other.lens]),
            None if self.starts is None else torch.cat([self.starts, other.starts]),
            max(self.max_len, other.max_len), max(self.capacity, other.capacity),
        )

    # -- step-graph protocol (oasr/engine/decoder_graph.py) -------------------------------
    def graph_key(self) -> tuple:
        return (self.step_blocks(), self.starts is not None)

    def graph_inputs(self) -> dict[str, torch.Tensor]:
        out = {"table": self.table[:, :self.step_blocks()], "lens": self.lens}
        if self.starts is not None:
            out["starts"] = self.starts
        return out

    def graph_view(self, inputs: dict[str, torch.Tensor]) -> PagedKv:
        """This state over static ``inputs`` (its table is exactly the step's width)."""
        return PagedKv(self.pool, inputs["table"], [], inputs["lens"], inputs.get("starts"),
                       self.max_len, self.capacity)

    def graph_outputs(self) -> dict[str, torch.Tensor]:
        return {"lens": self.lens}

    def graph_commit(self, outputs: dict[str, torch.Tensor], s: int = 1) -> None:
        self.lens = outputs["lens"]
        self._advance_host(s)


@dataclass
class PagedCrossKv(_Paged):
    """Cross-attention K/V over the encoder window: a fixed run of blocks per row, written once
    per layer at prefill. ``window`` keys per row are gathered; ``lens`` (B,) masks a shorter
    window, ``None`` reads the whole window (as ``CrossKv``)."""

    lens: torch.Tensor | None = None
    window: int = 0

    @classmethod
    def allocate(cls, pool: BlockPool, batch: int, window: int,
                 lens: torch.Tensor | None = None) -> PagedCrossKv:
        blocks, table = pool.allocate_rows(batch, window)
        return cls(pool, table, blocks, lens, window)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: (B, H, T_enc, D) of ``layer``, T_enc == ``window``."""
        pos = torch.arange(k.shape[2], device=self.table.device)
        _scatter(self.pool, layer, self.table, pos, k, v)

    def attend(self, layer: int, attn: torch.nn.Module, q: torch.Tensor) -> torch.Tensor:
        return paged_attention(attn, q, self.pool.k(layer), self.pool.v(layer), self.table,
                               self.lens, None, self.window)

    def rows(self, idx: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Dense copies of rows ``idx``: per layer (R, H, window, D) keys and values."""
        table = self.table.index_select(0, idx)
        ks = [gather_blocks(self.pool.k(i), table, self.window) for i in range(self.pool.layers)]
        vs = [gather_blocks(self.pool.v(i), table, self.window) for i in range(self.pool.layers)]
        return ks, vs

    def select(self, idx: torch.Tensor) -> PagedCrossKv:
        table, blocks = self._take(idx)
        return PagedCrossKv(self.pool, table, blocks,
                            None if self.lens is None else self.lens.index_select(0, idx),
                            self.window)

    def _full_lens(self) -> torch.Tensor:
        if self.lens is not None:
            return self.lens
        return torch.full((self.batch,), self.window, dtype=torch.long, device=self.table.device)

    def can_merge(self, other: object) -> bool:
        # Each row's window is its own kv_lens entry, so any two windows merge.
        return isinstance(other, PagedCrossKv) and other.pool is self.pool

    def merge(self, other: PagedCrossKv) -> PagedCrossKv:
        if not self.can_merge(other):
            raise ValueError("paged cross-attention groups on different pools cannot merge")
        lens = None
        if self.lens is not None or other.lens is not None or self.window != other.window:
            lens = torch.cat([self._full_lens(), other._full_lens()])
        return PagedCrossKv(self.pool, _cat_tables(self.table, other.table),
                            self.blocks + other.blocks, lens, max(self.window, other.window))

    # -- step-graph protocol (inputs only: a step never changes the cross K/V) -------------
    def graph_key(self) -> tuple:
        return (self.table.shape[1], self.window, self.lens is not None)

    def graph_inputs(self) -> dict[str, torch.Tensor]:
        out = {"table": self.table}
        if self.lens is not None:
            out["lens"] = self.lens
        return out

    def graph_view(self, inputs: dict[str, torch.Tensor]) -> PagedCrossKv:
        return PagedCrossKv(self.pool, inputs["table"], [], inputs.get("lens"), self.window)
