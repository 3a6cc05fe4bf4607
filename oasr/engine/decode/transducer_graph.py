"""Transducer greedy search that stays on the device: no host read inside the frame loop, and
on CUDA the loop replayed from graphs of ``FRAMES_PER_GRAPH`` frames.

``transducer_search.greedy_frames`` is the oracle: it asks the host each step whether any row
emitted (to stop early, and to append each label to a Python list), so a frame costs a device
round trip and a dozen launches. Here every step of every frame runs for every row, masked:
labels land in a (B, T·S + 1) buffer at each row's next free column (a row that did not emit
writes the last, discarded, column), and the hypotheses are read back once at the end. The
predictor always advances, keeping its old state where nothing was emitted (its ``advance``
already takes the mask), so the step is the same kernels whatever the data: capturable.

A graph holds ``FRAMES_PER_GRAPH`` frames unrolled; the frame index lives in a device tensor
the graph increments, so one capture serves every block of a batch. Graphs are keyed by
``(rows, frame capacity, max_sym_per_frame, dtype)``: the capacity is the batch's frame count
rounded up to a power of two (``step_graphs.frame_capacity``), so batches of similar length
share a capture; past ``max_captures`` a new shape evicts the least recently used.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from oasr.engine.decode.step_graphs import (
    GraphedSearch,
    StepGraphs,
    copy_state,
    frame_capacity,
)
from oasr.engine.decode.transducer_search import TransducerHypothesis

__all__ = ["DeviceGreedy", "greedy_search_device"]

FRAMES_PER_GRAPH = 16
DEFAULT_MAX_CAPTURES = 8


@dataclasses.dataclass
class _Buffers:
    """The search's whole mutable state, fixed addresses (a graph reads and writes these)."""

    enc: torch.Tensor  # (B, F, J) projected encoder frames
    lengths: torch.Tensor  # (B,)
    t: torch.Tensor  # () the next frame
    state: Any
    dec: torch.Tensor  # (B, J)
    tokens: torch.Tensor  # (B, F·S + 1), -1 unused
    frames: torch.Tensor  # (B, F·S + 1)
    probs: torch.Tensor  # (B, F·S + 1) float32
    score: torch.Tensor  # (B,) float64
    count: torch.Tensor  # (B,)


class DeviceGreedy(GraphedSearch):
    """Greedy transducer search for one model (``predictor``, ``joiner``), device-resident.

    ``graphs``: replay the loop from CUDA graphs (CUDA only); ``False`` runs the same masked
    loop eagerly (what the CPU runs, and the graphs' own reference).
    """

    def __init__(self, predictor: Any, joiner: Any, unk_id: int | None = None,
                 graphs: bool = True, max_captures: int = DEFAULT_MAX_CAPTURES) -> None:
        self.predictor, self.joiner = predictor, joiner
        self.blank = predictor.blank_id
        self.unk = self.blank if unk_id is None else unk_id
        self._graphs: StepGraphs[_Buffers] = StepGraphs("transducer greedy", max_captures,
                                                        enabled=graphs)

    # -- the step ------------------------------------------------------------------------
    def _frame(self, b: _Buffers, max_sym: int) -> None:
        """One frame for every row: ``max_sym`` masked steps, then ``t`` moves on."""
        cap = b.tokens.shape[1] - 1
        enc_t = b.enc.index_select(1, b.t.view(1))[:, 0]
        live = b.lengths > b.t
        state, dec = b.state, b.dec
        for _ in range(max_sym):
            logits = self.joiner(enc_t, dec)
            best = logits.argmax(dim=-1)
            emitted = live & (best != self.blank) & (best != self.unk)
            slot = torch.where(emitted, b.count, torch.full_like(b.count, cap))[:, None]
            b.tokens.scatter_(1, slot, best[:, None])
            b.frames.scatter_(1, slot, b.t.expand(best.shape[0], 1))
            b.probs.scatter_(1, slot, logits.float().softmax(dim=-1).gather(1, best[:, None]))
            picked = logits.gather(1, best[:, None])[:, 0].double()
            b.score.add_(torch.where(emitted, picked, torch.zeros_like(picked)))
            b.count.add_(emitted.to(b.count.dtype))
            state = self.predictor.advance(state, best, emitted)
            dec = torch.where(emitted[:, None],
                              self.joiner.project_decoder(self.predictor.predict(state)), dec)
            live = emitted
        copy_state(b.state, state)
        b.dec.copy_(dec)
        b.t.add_(1)

    def _block(self, b: _Buffers, max_sym: int) -> None:
        for _ in range(FRAMES_PER_GRAPH):
            self._frame(b, max_sym)

    # -- buffers -------------------------------------------------------------------------
    def _buffers(self, rows: int, frames: int, max_sym: int, enc_like: torch.Tensor,
                 device: torch.device) -> _Buffers:
        state = self.predictor.init_state(rows, device)
        dec = self.joiner.project_decoder(self.predictor.predict(state))
        width = frames * max_sym + 1
        return _Buffers(
            enc=enc_like.new_zeros(rows, frames, enc_like.shape[-1]),
            lengths=torch.zeros(rows, dtype=torch.int64, device=device),
            t=torch.zeros((), dtype=torch.int64, device=device),
            state=state, dec=dec,
            tokens=torch.full((rows, width), -1, dtype=torch.int64, device=device),
            frames=torch.zeros(rows, width, dtype=torch.int64, device=device),
            probs=torch.zeros(rows, width, dtype=torch.float32, device=device),
            score=torch.zeros(rows, dtype=torch.float64, device=device),
            count=torch.zeros(rows, dtype=torch.int64, device=device))

    def _load(self, b: _Buffers, enc: torch.Tensor, lengths: torch.Tensor) -> None:
        t = enc.shape[1]
        b.enc[:, :t].copy_(enc)
        b.enc[:, t:].zero_()
        b.lengths.copy_(lengths)
        b.t.zero_()
        state = self.predictor.init_state(enc.shape[0], enc.device)
        copy_state(b.state, state)
        b.dec.copy_(self.joiner.project_decoder(self.predictor.predict(state)))
        b.tokens.fill_(-1)
        b.frames.zero_()
        b.probs.zero_()
        b.score.zero_()
        b.count.zero_()

    # -- the search ----------------------------------------------------------------------
    @torch.inference_mode()
    def search(self, hidden: torch.Tensor, lengths: torch.Tensor, max_sym_per_frame: int = 1
               ) -> list[TransducerHypothesis]:
        """hidden (B, T, C_enc), lengths (B,) -> the hypotheses ``greedy_search`` returns."""
        if max_sym_per_frame < 1:
            raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
        rows, device = hidden.shape[0], hidden.device
        if not rows:
            return []
        lengths = lengths.to(device)
        longest = int(lengths.max().item())  # the one host read before the loop
        enc = self.joiner.project_encoder(hidden[:, :longest])
        blocks = math.ceil(longest / FRAMES_PER_GRAPH)
        hit = None
        if self.graphs and device.type == "cuda":
            frames = frame_capacity(longest)
            key = (rows, frames, max_sym_per_frame, enc.dtype, hidden.dtype)
            hit = self._graphs.get(
                key, lambda: self._buffers(rows, frames, max_sym_per_frame, enc, device),
                lambda b: self._block(b, max_sym_per_frame), device)
        if hit is not None:
            graph, b = hit
            self._load(b, enc, lengths)
            for _ in range(blocks):
                graph.replay()
        else:
            b = self._buffers(rows, blocks * FRAMES_PER_GRAPH, max_sym_per_frame, enc, device)
            self._load(b, enc, lengths)
            for _ in range(longest):
                self._frame(b, max_sym_per_frame)
        return _hypotheses(b)


def _hypotheses(b: _Buffers) -> list[TransducerHypothesis]:
    count = b.count.tolist()  # one read back for the whole batch
    used = max(count) if count else 0
    tokens = b.tokens[:, :used].tolist()
    frames = b.frames[:, :used].tolist()
    probs = b.probs[:, :used].tolist()
    scores = b.score.tolist()
    return [TransducerHypothesis(tokens[i][:n], frames[i][:n], scores[i], probs[i][:n])
            for i, n in enumerate(count)]


def greedy_search_device(predictor: Any, joiner: Any, hidden: torch.Tensor,
                         lengths: torch.Tensor, max_sym_per_frame: int = 1,
                         unk_id: int | None = None, graphs: bool = False
                         ) -> list[TransducerHypothesis]:
    """One-shot form of ``DeviceGreedy(...).search`` (no graph cache kept between calls)."""
    return DeviceGreedy(predictor, joiner, unk_id, graphs).search(hidden, lengths,
                                                                  max_sym_per_frame)
