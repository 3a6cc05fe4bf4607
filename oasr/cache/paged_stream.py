"""Paged encoder K/V for chunk-wise streaming: every stream's keys and values grow chunk by chunk
in a shared ``BlockPool`` and are trimmed to a left window.

A stream holds a list of blocks and ``base``, the absolute frame of its first block's first
position; ``end`` counts the frames stored so far. For a chunk of ``t`` new frames the visible
keys are ``[max(0, end - window), end + t)`` (``window=None``: every earlier frame). Before a
chunk is written, the blocks lying wholly before the window start go back to the pool, so a
stream with a window holds at most ``ceil((window + chunk) / block_size) + 1`` blocks however
long it runs. ``prepare`` returns a ``ChunkKv`` view for one cohort step (block tables padded
with the null block, per-row key windows); ``commit`` advances ``end`` after the forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oasr.cache.paged import NULL_BLOCK, BlockPool
from oasr.cache.paged_attention import gather_blocks


@dataclass
class _StreamPages:
    blocks: list[int]
    base: int = 0
    end: int = 0


@dataclass
class ChunkKv:
    """One cohort step's view of the pool.

    table: (B, W) block ids; base: (B,) absolute frame of slot 0 of each row's table;
    start / stop: (B,) the visible key slots ``[start, stop)`` relative to ``base``;
    offset: (B,) absolute frame of the chunk's first frame; new: (B,) frames written this step.
    """

    pool: BlockPool
    table: torch.Tensor
    base: torch.Tensor
    start: torch.Tensor
    stop: torch.Tensor
    offset: torch.Tensor
    new: torch.Tensor

    @property
    def slots(self) -> int:
        return self.table.shape[1] * self.pool.block_size

    def key_positions(self) -> torch.Tensor:
        """(B, slots) absolute frame of every gathered key slot."""
        return self.base[:, None] + torch.arange(self.slots, device=self.base.device)[None]

    def key_mask(self) -> torch.Tensor:
        """(B, 1, 1, slots) bool: True where a slot is a visible key."""
        j = torch.arange(self.slots, device=self.base.device)[None]
        return ((j >= self.start[:, None]) & (j < self.stop[:, None]))[:, None, None]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: (B, H, t, D) of the chunk; each row's first ``new`` frames are stored."""
        b, _, t, _ = k.shape
        bs = self.pool.block_size
        steps = torch.arange(t, device=self.base.device)[None]
        pos = (self.offset - self.base)[:, None] + steps  # (B, t) slots relative to base
        valid = steps < self.new[:, None]
        col = torch.div(pos, bs, rounding_mode="floor").clamp(max=self.table.shape[1] - 1)
        flat = (self.table.gather(1, col) * bs + pos % bs)[valid]
        for cache, x in ((self.pool.k(layer), k), (self.pool.v(layer), v)):
            rows = x.transpose(1, 2)[valid].to(cache.dtype)  # (N, H, D)
            cache.view(-1, *cache.shape[2:]).index_copy_(0, flat, rows)

    def keys(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, H, slots, D) keys and values of every row's table."""
        return (gather_blocks(self.pool.k(layer), self.table),
                gather_blocks(self.pool.v(layer), self.table))


class StreamKvPages:
    """Per-stream growing, windowed encoder K/V in one ``BlockPool``."""

    def __init__(self, pool: BlockPool, window: int | None) -> None:
        if window is not None and window < 0:
            raise ValueError(f"window must be >= 0 frames or None, got {window}")
        self.pool = pool
        self.window = window
        self.streams: dict[int, _StreamPages] = {}

    def open(self, sid: int) -> None:
        if sid in self.streams:
            raise ValueError(f"stream {sid} is already open")
        self.streams[sid] = _StreamPages([])

    def close(self, sid: int) -> None:
        pages = self.streams.pop(sid, None)
        if pages is not None and pages.blocks:
            self.pool.free(pages.blocks)

    def held_blocks(self, sid: int) -> int:
        return len(self.streams[sid].blocks)

    def end(self, sid: int) -> int:
        return self.streams[sid].end

    def _trim(self, pages: _StreamPages) -> None:
        if self.window is None:
            return
        first = max(0, pages.end - self.window)
        bs = self.pool.block_size
        drop = (first - pages.base) // bs
        if drop > 0:
            self.pool.free(pages.blocks[:drop])
            del pages.blocks[:drop]
            pages.base += drop * bs

    def prepare(self, sids: list[int], new: list[int], device: torch.device) -> ChunkKv:
        """Trim, reserve room for ``new[i]`` frames per stream and build the step's view.

        Raises ``PoolExhausted`` (from the pool) when the blocks are not there; the streams
        that already reserved keep their blocks (they are needed next step anyway)."""
        bs = self.pool.block_size
        rows = []
        for sid, n in zip(sids, new):
            pages = self.streams[sid]
            self._trim(pages)
            need = -(-(pages.end + n - pages.base) // bs) - len(pages.blocks)
            if need > 0:
                pages.blocks.extend(self.pool.allocate(need))
            rows.append(pages)
        width = max(1, max(len(p.blocks) for p in rows))
        table = torch.full((len(rows), width), NULL_BLOCK, dtype=torch.int64)
        for i, p in enumerate(rows):
            table[i, :len(p.blocks)] = torch.tensor(p.blocks, dtype=torch.int64)
        base = torch.tensor([p.base for p in rows], dtype=torch.int64)
        end = torch.tensor([p.end for p in rows], dtype=torch.int64)
        new_t = torch.tensor(new, dtype=torch.int64)
        first = end - self.window if self.window is not None else torch.zeros_like(end)
        first = first.clamp_min(0)

        def dev(x: torch.Tensor) -> torch.Tensor:
            return x.to(device, non_blocking=True)

        return ChunkKv(self.pool, dev(table), dev(base), dev(first - base),
                       dev(end + new_t - base), dev(end), dev(new_t))

    def commit(self, sids: list[int], new: list[int]) -> None:
        for sid, n in zip(sids, new):
            self.streams[sid].end += n
