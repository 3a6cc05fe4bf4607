"""Token-and-duration greedy search that stays on the device, on CUDA replayed from graphs of
``STEPS_PER_GRAPH`` steps.

``tdt_search.tdt_greedy`` is the oracle (and the CPU's path): each step is a dozen Python-
launched kernels, every label is stacked per step and the host is asked every few steps whether
any row is still inside its frames. Here the step is the same rule, masked for every row, over
static buffers: the frame pointer, the per-frame symbol count, the predictor state, and the
labels, written at each row's next free column of a (B, W + 1) buffer (a row that does not emit
writes the last, discarded, column). A step's kernels do not depend on the data, so a block of
steps is captured once per shape and replayed; the host reads one flag per block (whether any
row is still inside its frames) and the hypotheses once at the end.

W is frames x ``min(max_symbols_per_step, WIDTH_PER_FRAME)``: speech averages well under one
label per frame, so 4 per frame over a whole row is never reached in practice; a batch where a row
does reach it (its labels past W would be lost) is said in a warning and decoded again by the
oracle loop. Graphs are keyed by ``(rows, frame capacity, max symbols, dtypes)``: rows and
frames rounded up to powers of two (padding rows have length 0 and never move; frames at least
64, ``step_graphs.frame_capacity``), so a job's batches share a few captures; past
``max_captures`` a new shape evicts the least recently used.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch

from oasr.engine.decode.step_graphs import (
    GraphedSearch,
    StepGraphs,
    copy_state,
    frame_capacity,
)
from oasr.engine.decode.tdt_search import TdtHypothesis, tdt_greedy

__all__ = ["TdtDeviceGreedy"]

logger = logging.getLogger("oasr.engine")

STEPS_PER_GRAPH = 16
DEFAULT_MAX_CAPTURES = 8
WIDTH_PER_FRAME = 4


@dataclasses.dataclass
class _Buffers:
    """The search's mutable state at fixed addresses (a graph reads and writes these)."""

    enc: torch.Tensor  # (B, F, J) projected encoder frames
    lengths: torch.Tensor  # (B,)
    table: torch.Tensor  # (D,) the durations a duration logit's index stands for
    frame: torch.Tensor  # (B,) each row's current frame
    symbols: torch.Tensor  # (B,) labels emitted at that frame so far
    active: torch.Tensor  # (B,) bool: frame < length
    state: Any
    dec: torch.Tensor  # (B, J)
    tokens: torch.Tensor  # (B, W + 1)
    frames: torch.Tensor  # (B, W + 1)
    durations: torch.Tensor  # (B, W + 1)
    probs: torch.Tensor  # (B, W + 1) float32
    count: torch.Tensor  # (B,) labels emitted (may pass W: then the batch overflowed)


class TdtDeviceGreedy(GraphedSearch):
    """Greedy TDT search for one model, device-resident; ``graphs``: replay captured blocks
    on CUDA (``False``: the same masked loop, eager, which the CPU tests run)."""

    def __init__(self, predictor: Any, joiner: Any, blank_id: int, vocab_size: int,
                 durations: list[int], graphs: bool = True,
                 max_captures: int = DEFAULT_MAX_CAPTURES) -> None:
        self.predictor, self.joiner = predictor, joiner
        self.blank, self.vocab = blank_id, vocab_size
        self.durations = [int(d) for d in durations]
        self._graphs: StepGraphs[_Buffers] = StepGraphs("tdt greedy", max_captures,
                                                        enabled=graphs)

    # -- the step ------------------------------------------------------------------------
    def _step(self, b: _Buffers, max_sym: int) -> None:
        rows, frames_max = b.enc.shape[0], b.enc.shape[1]
        width = b.tokens.shape[1] - 1
        at = torch.arange(rows, device=b.enc.device) * frames_max + b.frame.clamp(
            max=frames_max - 1)
        logits = self.joiner(b.enc.view(rows * frames_max, -1).index_select(0, at), b.dec)
        token_logits = logits[:, :self.vocab].float()
        tok = token_logits.argmax(dim=-1)
        dur = b.table[logits[:, self.vocab:].argmax(dim=-1)]
        blank = tok == self.blank
        one = torch.ones_like(dur)
        dur = torch.where(blank & (dur == 0), one, dur)
        emit = b.active & ~blank
        symbols = b.symbols + emit.to(b.symbols.dtype)
        dur = torch.where(emit & (dur == 0) & (symbols >= max_sym), one, dur)
        slot = torch.where(emit & (b.count < width), b.count,
                           torch.full_like(b.count, width))[:, None]
        b.tokens.scatter_(1, slot, tok[:, None])
        b.frames.scatter_(1, slot, b.frame[:, None])
        b.durations.scatter_(1, slot, dur[:, None])
        b.probs.scatter_(1, slot, token_logits.softmax(dim=-1).gather(1, tok[:, None]))
        b.count.add_(emit.to(b.count.dtype))
        state = self.predictor.advance(b.state, tok, emit)
        copy_state(b.state, state)
        b.dec.copy_(torch.where(emit[:, None],
                                self.joiner.project_decoder(self.predictor.predict(state)),
                                b.dec))
        b.frame.copy_(torch.where(b.active, b.frame + dur, b.frame))
        b.symbols.copy_(torch.where(dur > 0, torch.zeros_like(symbols), symbols))
        torch.lt(b.frame, b.lengths, out=b.active)

    def _block(self, b: _Buffers, max_sym: int) -> None:
        for _ in range(STEPS_PER_GRAPH):
            self._step(b, max_sym)

    # -- buffers -------------------------------------------------------------------------
    def _buffers(self, rows: int, frames: int, max_sym: int, enc_like: torch.Tensor
                 ) -> _Buffers:
        device = enc_like.device
        state = self.predictor.init_state(rows, device)
        dec = self.joiner.project_decoder(self.predictor.predict(state))
        width = frames * min(max_sym, WIDTH_PER_FRAME) + 1
        index = torch.zeros(rows, width, dtype=torch.int64, device=device)
        return _Buffers(
            enc=enc_like.new_zeros(rows, frames, enc_like.shape[-1]),
            lengths=torch.zeros(rows, dtype=torch.int64, device=device),
            table=torch.tensor(self.durations, dtype=torch.int64, device=device),
            frame=torch.zeros(rows, dtype=torch.int64, device=device),
            symbols=torch.zeros(rows, dtype=torch.int64, device=device),
            active=torch.zeros(rows, dtype=torch.bool, device=device),
            state=state, dec=dec, tokens=index, frames=torch.zeros_like(index),
            durations=torch.zeros_like(index),
            probs=torch.zeros(rows, width, dtype=torch.float32, device=device),
            count=torch.zeros(rows, dtype=torch.int64, device=device))

    def _load(self, b: _Buffers, enc: torch.Tensor, lengths: torch.Tensor) -> None:
        n, t = enc.shape[0], enc.shape[1]
        b.enc.zero_()
        b.enc[:n, :t].copy_(enc)
        b.lengths.zero_()
        b.lengths[:n].copy_(lengths)
        b.frame.zero_()
        b.symbols.zero_()
        torch.lt(b.frame, b.lengths, out=b.active)
        state = self.predictor.init_state(b.enc.shape[0], enc.device)
        copy_state(b.state, state)
        b.dec.copy_(self.joiner.project_decoder(self.predictor.predict(state)))
        b.count.zero_()

    # -- the search ----------------------------------------------------------------------
    @torch.inference_mode()
    def search(self, hidden: torch.Tensor, lengths: torch.Tensor, max_symbols_per_step: int
               ) -> list[TdtHypothesis]:
        """hidden (B, T, C), lengths (B,) -> one hypothesis per row, as ``tdt_greedy``."""
        if hidden.ndim != 3 or lengths.shape != (hidden.shape[0],):
            raise ValueError(f"hidden must be (B, T, C) and lengths (B,), got "
                             f"{tuple(hidden.shape)} and {tuple(lengths.shape)}")
        if max_symbols_per_step < 1:
            raise ValueError(f"max_symbols_per_step must be >= 1, got {max_symbols_per_step}")
        batch, device = hidden.shape[0], hidden.device
        if not batch:
            return []
        lengths = lengths.to(device=device, dtype=torch.int64)
        longest = max(int(lengths.max().item()), 1)  # the one host read before the loop
        enc = self.joiner.project_encoder(hidden[:, :longest])
        hit = None
        if self.graphs and device.type == "cuda":
            rows = 1 << (batch - 1).bit_length()
            frames = frame_capacity(longest)
            key = (rows, frames, max_symbols_per_step, enc.dtype, hidden.dtype)
            hit = self._graphs.get(
                key, lambda: self._buffers(rows, frames, max_symbols_per_step, enc),
                lambda b: self._block(b, max_symbols_per_step), device)
        if hit is not None:
            graph, b = hit
            self._load(b, enc, lengths)
            run = graph.replay
        else:
            b = self._buffers(batch, enc.shape[1], max_symbols_per_step, enc)
            self._load(b, enc, lengths)

            def run() -> None:
                self._block(b, max_symbols_per_step)
        while bool(b.active.any()):  # one host read per block of steps
            run()
        if int(b.count.max()) > b.tokens.shape[1] - 1:
            logger.warning("tdt greedy: a row emitted more than %d labels per frame on average;"
                           " this batch is decoded again by the host loop", WIDTH_PER_FRAME)
            return tdt_greedy(self.predictor, self.joiner, hidden, lengths, self.blank,
                              self.vocab, self.durations, max_symbols_per_step)
        return _hypotheses(b, batch)


def _hypotheses(b: _Buffers, batch: int) -> list[TdtHypothesis]:
    count = b.count[:batch].tolist()
    used = max(count) if count else 0
    tokens = b.tokens[:batch, :used].tolist()
    frames = b.frames[:batch, :used].tolist()
    durations = b.durations[:batch, :used].tolist()
    probs = b.probs[:batch, :used].tolist()
    return [TdtHypothesis(tokens[i][:n], frames[i][:n], durations[i][:n], probs[i][:n])
            for i, n in enumerate(count)]
