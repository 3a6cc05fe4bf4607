"""Transducer greedy search that continues across chunks: the ``transducer`` family's greedy
path with the predictor state kept per stream, so feeding a stream's encoder frames chunk by
chunk gives the hypothesis the offline search gives on the whole sequence.

``feed(hidden (T, C_enc))`` advances by T frames; ``best()`` is the hypothesis so far (tokens,
each token's frame and posterior, score), frames counted from the stream's first fed frame;
greedy never rewrites a token, so ``stable_prefix()`` is all of them. The shape of the CTC
streams (``ctc_streaming``), for a chunk-wise policy that drives a transducer head.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.engine.decode.transducer_search import TransducerHypothesis, greedy_frames

__all__ = ["TransducerGreedyStream"]


class TransducerGreedyStream:
    def __init__(self, predictor: Any, joiner: Any, max_sym_per_frame: int = 1,
                 unk_id: int | None = None) -> None:
        if max_sym_per_frame < 1:
            raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
        self.predictor, self.joiner = predictor, joiner
        self.max_sym_per_frame, self.unk_id = max_sym_per_frame, unk_id
        self.reset()

    def reset(self) -> None:
        """A new utterance: the predictor restarts from the blank, frames from 0."""
        self.hyp = TransducerHypothesis([])
        self.frame = 0
        self.state: Any = None
        self.dec: torch.Tensor | None = None

    def feed(self, hidden: torch.Tensor) -> None:
        """hidden (T, C_enc): the stream's next encoder frames."""
        if hidden.dim() != 2:
            raise ValueError(f"hidden must be (T, C_enc), got {tuple(hidden.shape)}")
        if not hidden.shape[0]:
            return
        if self.state is None:
            self.state = self.predictor.init_state(1, hidden.device)
            self.dec = self.joiner.project_decoder(self.predictor.predict(self.state))
        lens = torch.tensor([hidden.shape[0]], device=hidden.device)
        self.state, self.dec = greedy_frames(
            self.predictor, self.joiner, hidden[None], lens, self.state, self.dec, [self.hyp],
            self.frame, self.max_sym_per_frame, self.unk_id)
        self.frame += hidden.shape[0]

    def best(self) -> TransducerHypothesis:
        return self.hyp

    def stable_prefix(self) -> int:
        return len(self.hyp.tokens)
