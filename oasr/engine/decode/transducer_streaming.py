"""Transducer greedy search that continues across chunks: the ``transducer`` family's greedy
path with the predictor state kept per stream, so feeding a stream's encoder frames chunk by
chunk gives the hypothesis the offline search gives on the whole sequence.

``feed(hidden (T, C_enc))`` advances by T frames; ``best()`` is the hypothesis so far (tokens,
each token's frame and posterior, score), frames counted from the stream's first fed frame;
greedy never rewrites a token, so ``stable_prefix()`` is all of them. The shape of the CTC
streams (``ctc_streaming``), for a chunk-wise policy that drives a transducer head.

``feed_streams(streams, hidden (B, T, C_enc), lens (B,))`` advances a cohort of streams (one
row each) in one batched search: their predictor states are stacked
(``TransducerPredictor.stack_states``), each row searched from its own state, and split back;
the same hypotheses as feeding each stream alone.

``TransducerStreamingSession`` is the ``transducer`` family's streaming session
(``oasr.engine.decode.streaming``): greedy with each stream's predictor state kept, the cohort
in one ``feed_streams``; a prompted model's frames are first conditioned on each stream's
language (the strategy's ``condition``).
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.engine.decode.streaming import StreamingSession
from oasr.engine.decode.transducer_search import TransducerHypothesis, greedy_frames

__all__ = ["TransducerGreedyStream", "TransducerStreamingSession", "feed_streams"]


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

    def _start(self, device: torch.device) -> None:
        if self.state is None:
            self.state = self.predictor.init_state(1, device)
            self.dec = self.joiner.project_decoder(self.predictor.predict(self.state))

    def feed(self, hidden: torch.Tensor) -> None:
        """hidden (T, C_enc): the stream's next encoder frames."""
        if hidden.dim() != 2:
            raise ValueError(f"hidden must be (T, C_enc), got {tuple(hidden.shape)}")
        if not hidden.shape[0]:
            return
        self._start(hidden.device)
        lens = torch.tensor([hidden.shape[0]], device=hidden.device)
        self.state, self.dec = greedy_frames(
            self.predictor, self.joiner, hidden[None], lens, self.state, self.dec, [self.hyp],
            self.frame, self.max_sym_per_frame, self.unk_id)
        self.frame += hidden.shape[0]

    def best(self) -> TransducerHypothesis:
        return self.hyp

    def stable_prefix(self) -> int:
        return len(self.hyp.tokens)


def feed_streams(streams: list[TransducerGreedyStream], hidden: torch.Tensor,
                 lens: torch.Tensor) -> None:
    """hidden (B, T, C_enc), lens (B,): row ``b`` is the next ``lens[b]`` frames of
    ``streams[b]``; one batched greedy pass over the cohort."""
    if hidden.dim() != 3 or hidden.shape[0] != len(streams):
        raise ValueError(f"hidden must be ({len(streams)}, T, C_enc), got "
                         f"{tuple(hidden.shape)}")
    if not streams:
        return
    first = streams[0]
    if any(s.predictor is not first.predictor or s.joiner is not first.joiner
           or s.max_sym_per_frame != first.max_sym_per_frame or s.unk_id != first.unk_id
           for s in streams):
        raise ValueError("feed_streams batches streams of one predictor, joiner and options")
    if len(streams) == 1:
        streams[0].feed(hidden[0, :int(lens[0])])
        return
    for s in streams:
        s._start(hidden.device)
    predictor = first.predictor
    state = predictor.stack_states([s.state for s in streams])
    dec = torch.cat([s.dec for s in streams])
    fresh = [TransducerHypothesis([]) for _ in streams]
    state, dec = greedy_frames(predictor, first.joiner, hidden, lens, state, dec, fresh, 0,
                               first.max_sym_per_frame, first.unk_id)
    counts = lens.detach().cpu().tolist()
    for s, st, d, h, n in zip(streams, predictor.unstack_states(state), dec.split(1), fresh,
                              counts):
        s.state, s.dec = st, d
        s.hyp.tokens += h.tokens
        s.hyp.frames += [s.frame + f for f in h.frames]
        s.hyp.probs += h.probs
        s.hyp.score += h.score
        s.frame += int(n)


class TransducerStreamingSession(StreamingSession):
    name = "transducer"

    def __init__(self, strategy: Any) -> None:
        super().__init__(strategy)
        beam = strategy.options.beam_size
        if beam != 1:
            raise ValueError(f"beam_size={beam}: a transducer streams with greedy search only "
                             "(beam_size=1)")
        self.predictor, self.joiner = strategy.predictor, strategy.joiner
        self.max_sym_per_frame = strategy.options.max_sym_per_frame
        self.unk_id = strategy.unk_id
        self.conditions = ("language",) if strategy.prompted else ()

    def new_search(self) -> TransducerGreedyStream:
        return TransducerGreedyStream(self.predictor, self.joiner, self.max_sym_per_frame,
                                      self.unk_id)

    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None:
        if self.conditions:
            out = self.strategy.condition(out, languages)
        feed_streams(searches, out, out_lens.to(out.device))
