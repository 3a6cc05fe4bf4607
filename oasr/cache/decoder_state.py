"""Row-indexed decoder state for label-synchronous AR families.

Every row carries its own KV extent, so groups prefilled at different times merge and a
retired row leaves by index selection:

========  ==================================================================
``lens``  keys cached per row, and so the row's next write index (B,)
``starts``  first valid key per row (left padding), ``None`` for a fixed prompt
positions  derived, ``lens - starts``; never stored, so it cannot disagree
========  ==================================================================

``DenseKv`` is the dense storage: a ``(B, H, cap, D)`` buffer per layer. An AED state pairs
a self-attention ``DenseKv`` with a ``CrossKv`` (the encoder window's K/V per layer, written
once at prefill). ``oasr.cache.paged`` holds the paged counterparts (``PagedKv``,
``PagedCrossKv``) with the same surface, so a decoder calls ``write`` / ``attend`` /
``advance`` without knowing which it holds:

=================  ===========================================================================
``write``          store the new keys at each row's ``lens``
``attend``         ``attend(layer, attn, q)``: the layer's ``Attention`` over the row's keys
``release_rows``   a retiring row's storage can go (paged: blocks back to the pool; dense: no-op)
``capturable``     every address a step reads is fixed (paged), so a step can be graph-captured
=================  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn


def compaction_moves(idx: torch.Tensor, batch: int) -> list[tuple[int, int]] | None:
    """The (destination, source) row moves that realise ``select(idx)`` in place, or None.

    In place is possible when ``idx`` keeps distinct rows and every row that moves comes from
    beyond the new size (a swap-remove compaction), so no source is overwritten before it is
    read. Beam reorders (repeated parents) are not of that form and take a fresh copy.
    """
    order = idx.tolist()
    n = len(order)
    if n > batch or len(set(order)) != n:
        return None
    moves = [(p, src) for p, src in enumerate(order) if p != src]
    return moves if all(src >= n for _, src in moves) else None


def _move_rows(tensors: list[torch.Tensor], moves: list[tuple[int, int]], n: int
               ) -> list[torch.Tensor]:
    if moves:
        dst = torch.tensor([d for d, _ in moves], device=tensors[0].device)
        src = torch.tensor([s for _, s in moves], device=tensors[0].device)
        for t in tensors:
            t[dst] = t[src]
    return [t[:n] for t in tensors]


def append_rows(views: list[torch.Tensor], stores: list[torch.Tensor] | None,
                extra: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Rows of ``extra`` after the rows of ``views``: (new views, new stores).

    ``stores`` are the tensors the views are the leading rows of. When they have room only the
    new rows are copied; otherwise the rows move into stores with room for as many again, so a
    group absorbing micro-batch after micro-batch copies each row a bounded number of times
    rather than once per merge (the cross half of a row is the whole encoder window).
    """
    n, m = views[0].shape[0], extra[0].shape[0]
    if stores is None or stores[0].shape[0] < n + m:
        cap = 2 * (n + m)
        stores = [torch.empty((cap, *v.shape[1:]), dtype=v.dtype, device=v.device)
                  for v in views]
        for store, v in zip(stores, views):
            store[:n] = v
    for store, e in zip(stores, extra):
        store[n:n + m] = e
    return [store[:n + m] for store in stores], stores


@dataclass
class DenseKv:
    """Self-attention KV of one decode group. k/v: per layer (B, H, cap, D)."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    lens: torch.Tensor  # (B,) int64
    starts: torch.Tensor | None
    capturable: ClassVar[bool] = False
    # Host-side upper bound of ``lens`` so attention reads only the filled prefix without a
    # device sync (every row advances by one key per step).
    max_len: int
    # The storage k/v are the leading rows of (room to absorb merged groups), if larger.
    stores: tuple[list[torch.Tensor], list[torch.Tensor]] | None = field(default=None,
                                                                          repr=False)

    @classmethod
    def allocate(cls, layers: int, batch: int, heads: int, cap: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> DenseKv:
        # Zeroed: stale values past a row's length are masked, but must stay finite.
        def make() -> list[torch.Tensor]:
            return [torch.zeros(batch, heads, cap, head_dim, device=device, dtype=dtype)
                    for _ in range(layers)]

        return cls(make(), make(), torch.zeros(batch, dtype=torch.long, device=device), None, 0)

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    def positions(self) -> torch.Tensor:
        pos = self.lens if self.starts is None else self.lens - self.starts
        return pos.clamp(max=self.capacity - 1)  # a saturated (finished) row, see ``write``

    def write(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Write (B, H, S, D) new keys at each row's own ``lens`` (lens advance in ``advance``)."""
        s = k_new.shape[2]
        b = self.batch
        if s == 1:
            # A row's capacity covers its prompt and max_new tokens, so only a finished row,
            # stepping on until the host next reads the end flags, reaches the end: it keeps
            # rewriting the last slot, which nothing reads.
            rows = torch.arange(b, device=k_new.device)
            idx = self.lens.clamp(max=self.capacity - 1)
            self.k[layer][rows, :, idx] = k_new[:, :, 0]
            self.v[layer][rows, :, idx] = v_new[:, :, 0]
            return
        if self.max_len + s > self.capacity:
            raise RuntimeError(
                f"decoder KV capacity {self.capacity} exceeded (have {self.max_len}, adding {s}); "
                "raise max_new_tokens headroom or lower the prompt"
            )
        # Prefill: every row starts at the same offset (a fresh group).
        start = self.max_len
        self.k[layer][:, :, start:start + s] = k_new
        self.v[layer][:, :, start:start + s] = v_new

    def attend(self, layer: int, attn: nn.Module, q: torch.Tensor) -> torch.Tensor:
        """q (B, H, S, D) over each row's keys, the S new ones included -> (B, H, S, D)."""
        s = q.shape[2]
        width = self.max_len + s  # only the filled prefix
        return attn(q, self.k[layer][:, :, :width], self.v[layer][:, :, :width],
                    kv_lens=self.lens + s, kv_starts=self.starts)

    def release_rows(self, rows: list[int]) -> None:
        """Dense rows keep their storage until the group compacts."""

    def advance(self, s: int) -> None:
        # Saturate at the buffer: only a finished row gets there (see ``write``), and a merged
        # group's bound, its oldest row's, would otherwise outgrow the buffer its newer rows
        # still fit in.
        self.lens = (self.lens + s).clamp(max=self.capacity)
        self.max_len = min(self.max_len + s, self.capacity)

    def select(self, idx: torch.Tensor) -> DenseKv:
        moves = compaction_moves(idx, self.batch)
        if moves is not None:  # compaction: copy only the rows that move
            n = idx.numel()
            return DenseKv(_move_rows(self.k, moves, n), _move_rows(self.v, moves, n),
                           self.lens.index_select(0, idx),
                           None if self.starts is None else self.starts.index_select(0, idx),
                           self.max_len, self.stores)
        return DenseKv(
            [t.index_select(0, idx) for t in self.k],
            [t.index_select(0, idx) for t in self.v],
            self.lens.index_select(0, idx),
            None if self.starts is None else self.starts.index_select(0, idx),
            self.max_len,
        )

    def can_merge(self, other: object) -> bool:
        return (isinstance(other, DenseKv) and self.capacity == other.capacity
                and (self.starts is None) == (other.starts is None))

    def merge(self, other: DenseKv) -> DenseKv:
        """This group's rows then ``other``'s; ``self``'s storage may be reused in place."""
        if not self.can_merge(other):
            raise ValueError("dense KV groups with different capacities or padding cannot merge")
        k, k_store = append_rows(self.k, self.stores[0] if self.stores else None, other.k)
        v, v_store = append_rows(self.v, self.stores[1] if self.stores else None, other.v)
        return DenseKv(
            k, v, torch.cat([self.lens, other.lens]),
            None if self.starts is None else torch.cat([self.starts, other.starts]),
            max(self.max_len, other.max_len), (k_store, v_store),
        )


@dataclass
class CrossKv:
    """Cross-attention K/V over the encoder window, per layer (B, H, T_enc, D); ``lens`` (B,)."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    lens: torch.Tensor | None  # None: every row reads the whole window
    stores: tuple[list[torch.Tensor], list[torch.Tensor]] | None = field(default=None,
                                                                          repr=False)
    capturable: ClassVar[bool] = False

    def attend(self, layer: int, attn: nn.Module, q: torch.Tensor) -> torch.Tensor:
        """q (B, H, S, D) over the encoder window -> (B, H, S, D)."""
        return attn(q, self.k[layer], self.v[layer], kv_lens=self.lens)

    def rows(self, idx: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Rows ``idx``: per layer (R, H, T_enc, D) keys and values."""
        return ([k.index_select(0, idx) for k in self.k],
                [v.index_select(0, idx) for v in self.v])

    def release_rows(self, rows: list[int]) -> None:
        """Dense rows keep their storage until the group compacts."""

    def select(self, idx: torch.Tensor) -> CrossKv:
        moves = compaction_moves(idx, self.k[0].shape[0])
        if moves is not None:  # compaction: copy only the rows that move
            n = idx.numel()
            return CrossKv(_move_rows(self.k, moves, n), _move_rows(self.v, moves, n),
                           None if self.lens is None else self.lens.index_select(0, idx),
                           self.stores)
        return CrossKv([t.index_select(0, idx) for t in self.k],
                       [t.index_select(0, idx) for t in self.v],
                       None if self.lens is None else self.lens.index_select(0, idx))

    @property
    def width(self) -> int:
        return self.k[0].shape[2]

    def can_merge(self, other: object) -> bool:
        # Dense cross-attention is read over the whole window, so widths must agree.
        return (isinstance(other, CrossKv) and self.width == other.width
                and (self.lens is None) == (other.lens is None))

    def merge(self, other: CrossKv) -> CrossKv:
        """This group's rows then ``other``'s; ``self``'s storage may be reused in place."""
        if not self.can_merge(other):
            raise ValueError("cross-attention windows of different widths cannot merge (dense)")
        k, k_store = append_rows(self.k, self.stores[0] if self.stores else None, other.k)
        v, v_store = append_rows(self.v, self.stores[1] if self.stores else None, other.v)
        return CrossKv(k, v, None if self.lens is None else torch.cat([self.lens, other.lens]),
                       (k_store, v_store))


@dataclass
class AedState:
    """The decoder state of one AED decode group: self KV + cross K/V, row-indexed.

    ``kv`` is a ``DenseKv`` or a ``PagedKv``, ``cross`` a ``CrossKv`` or a ``PagedCrossKv``.
    """

    kv: Any
    cross: Any

    @property
    def batch(self) -> int:
        return self.kv.batch

    @property
    def capturable(self) -> bool:
        """Every component a step reads is paged, so the step can be graph-captured."""
        return bool(self.kv.capturable and self.cross.capturable)

    def release_rows(self, rows: list[int]) -> None:
        self.kv.release_rows(rows)
        self.cross.release_rows(rows)

    # -- step-graph protocol (oasr/engine/decoder_graph.py; capturable states only) -------
    def graph_key(self) -> tuple:
        return self.kv.graph_key() + self.cross.graph_key()

    def graph_inputs(self) -> dict[str, torch.Tensor]:
        return {**{f"kv.{k}": t for k, t in self.kv.graph_inputs().items()},
                **{f"cross.{k}": t for k, t in self.cross.graph_inputs().items()}}

    def graph_view(self, inputs: dict[str, torch.Tensor]) -> AedState:
        def part(prefix: str) -> dict[str, torch.Tensor]:
            return {k[len(prefix):]: t for k, t in inputs.items() if k.startswith(prefix)}

        return AedState(self.kv.graph_view(part("kv.")), self.cross.graph_view(part("cross.")))

    def graph_outputs(self) -> dict[str, torch.Tensor]:
        return {f"kv.{k}": t for k, t in self.kv.graph_outputs().items()}

    def graph_commit(self, outputs: dict[str, torch.Tensor], s: int = 1) -> None:
        self.kv.graph_commit({k[3:]: t for k, t in outputs.items() if k.startswith("kv.")}, s)

    def select(self, idx: torch.Tensor) -> AedState:
        return AedState(self.kv.select(idx), self.cross.select(idx))

    def can_merge(self, other: AedState) -> bool:
        return self.kv.can_merge(other.kv) and self.cross.can_merge(other.cross)

    def merge(self, other: AedState) -> AedState:
        return AedState(self.kv.merge(other.kv), self.cross.merge(other.cross))
