"""The decoding graph in the form both searches read: flat arrays, each state's emitting arcs
(input label k > 0: consumes a frame, scores token k - 1) apart from its epsilon arcs, each half
in the FST's own order (the CPU search walks them in that order, as Kaldi's decoder does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oasr.graphs.openfst import FstArrays

__all__ = ["DecodingGraph"]


@dataclass
class DecodingGraph:
    start: int
    final_cost: np.ndarray  # (S,) float32, +inf: not final
    emit_offsets: np.ndarray  # (S + 1,) int64
    emit_ilabel: np.ndarray  # (E,) int32
    emit_olabel: np.ndarray
    emit_weight: np.ndarray  # float32
    emit_next: np.ndarray
    eps_offsets: np.ndarray  # (S + 1,) int64
    eps_olabel: np.ndarray  # (N,) int32
    eps_weight: np.ndarray
    eps_next: np.ndarray
    _native: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_arrays(cls, fst: FstArrays) -> DecodingGraph:
        """Split an FST's arcs (grouped by source state, in file order) into the two halves."""
        num_states = len(fst.final)
        if num_states == 0:
            raise ValueError("the graph has no states")
        if not 0 <= fst.start < num_states:
            raise ValueError(f"the graph's start state {fst.start} is not one of its "
                             f"{num_states} states (an empty FST?)")
        if len(fst.src) and np.any(np.diff(fst.src) < 0):
            raise ValueError("the arcs are not grouped by source state")
        if np.any(fst.ilabel < 0):
            raise ValueError("the graph has negative input labels")
        emit = fst.ilabel > 0
        halves = []
        for mask in (emit, ~emit):
            counts = np.bincount(fst.src[mask], minlength=num_states)
            offsets = np.zeros(num_states + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            halves.append((offsets, mask))
        (eo, em), (no, nm) = halves
        i32 = np.int32
        return cls(
            start=int(fst.start), final_cost=np.ascontiguousarray(fst.final, np.float32),
            emit_offsets=eo, emit_ilabel=fst.ilabel[em].astype(i32),
            emit_olabel=fst.olabel[em].astype(i32),
            emit_weight=fst.weight[em].astype(np.float32), emit_next=fst.next[em].astype(i32),
            eps_offsets=no, eps_olabel=fst.olabel[nm].astype(i32),
            eps_weight=fst.weight[nm].astype(np.float32), eps_next=fst.next[nm].astype(i32))

    @property
    def num_states(self) -> int:
        return len(self.final_cost)

    @property
    def num_arcs(self) -> int:
        return len(self.emit_ilabel) + len(self.eps_olabel)

    @property
    def max_token(self) -> int:
        """The highest model token id an arc consumes (-1: none)."""
        return int(self.emit_ilabel.max()) - 1 if len(self.emit_ilabel) else -1

    def native(self) -> Any:
        """The graph as ``oasr._C.wfst.Graph`` (built once; it holds these arrays)."""
        if self._native is None:
            from oasr.native import native

            self._native = native("wfst").Graph(
                self.start, self.final_cost, self.emit_offsets, self.emit_ilabel,
                self.emit_olabel, self.emit_weight, self.emit_next, self.eps_offsets,
                self.eps_olabel, self.eps_weight, self.eps_next)
        return self._native
