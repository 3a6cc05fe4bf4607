"""The ``transducer`` family: greedy or modified beam search over encoder hidden states.

The engine runs the encoder alone (``consumes="hidden"``) and hands over (B, T', C); the family
drives the model's ``predictor`` (a ``TransducerPredictor``) and ``joiner`` (a ``Joiner``)
through ``transducer_search``. ``beam_size`` 1 is greedy with up to ``max_sym_per_frame``
labels per frame (on CUDA the device-resident loop of ``transducer_graph``, replayed from
CUDA graphs; the host loop elsewhere, and as its oracle); wider beams are icefall's modified
beam search (one label per frame), which needs a label-window predictor
(``TransducerPredictor.label_window``): a recurrent predictor refuses it at construction,
naming the fix.

A request's ``hotwords`` boost modified beam search (``transducer_search``; each matched token
worth ``hotwords_score``, the family's by default); greedy search refuses them.

Word timings come from the emission frames the search records: a label's span runs from its
emitting frame to the next label's, and its posterior is the joiner's softmax at emission.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from oasr.engine.decode.alignment import emission_spans, fill_word_timings
from oasr.engine.decode.ctc import DEFAULT_HOTWORDS_SCORE, ContextCache, mean_posterior
from oasr.engine.decode.encoder_chunks import EncoderChunkOptions
from oasr.engine.decode.frame_sync import FrameSyncStrategy
from oasr.engine.decode.options import option
from oasr.engine.decode.transducer_fused import FusedGreedy
from oasr.engine.decode.transducer_graph import DeviceGreedy
from oasr.engine.decode.transducer_search import (
    TransducerHypothesis,
    greedy_search,
    modified_beam_search,
)
from oasr.engine.decode.transducer_streaming import TransducerStreamingSession
from oasr.engine.request import Request, RequestOutput

__all__ = ["TransducerDecodeStrategy", "TransducerOptions"]


@dataclass
class TransducerOptions(EncoderChunkOptions):
    beam_size: int = option(1, doc="1: greedy search; > 1: icefall's modified beam search "
                                   "with this many hypotheses (one label per frame).")
    max_sym_per_frame: int = option(1, doc="Greedy only: labels a frame may emit before the "
                                           "search moves to the next frame.")
    nbest: int = option(1, doc="Hypotheses returned per row (<= beam_size); > 1 fills "
                               "nbest_texts. A request's n_best overrides it.")
    cuda_graphs: bool = option(True, doc="Greedy on CUDA: replay the frame loop from CUDA "
                                         "graphs (false: the same device loop, eager).")
    fused: bool = option(False, doc="Greedy with a stateless predictor and an additive joiner: "
                                    "the whole search in one call (greedy_decode.cuh; on CUDA "
                                    "one launch per batch). Off by default: slower than the "
                                    "batched loop on CPU past 4 rows, not yet run on a GPU.")
    hotwords_score: float = option(DEFAULT_HOTWORDS_SCORE,
                                   doc="Bonus per matched token of a request's hotwords (a "
                                       "request's hotwords_score overrides it).")

    def validate(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.max_sym_per_frame < 1:
            raise ValueError(f"max_sym_per_frame must be >= 1, got {self.max_sym_per_frame}")
        if not 1 <= self.nbest <= self.beam_size:
            raise ValueError(f"nbest must be in [1, beam_size={self.beam_size}], got "
                             f"{self.nbest}")
        if self.hotwords_score < 0:
            raise ValueError(f"hotwords_score must be >= 0, got {self.hotwords_score}")


class TransducerDecodeStrategy(FrameSyncStrategy):
    """Frame-synchronous, non-incremental: one ``decode_offline`` call per micro-batch."""

    name = "transducer"
    consumes = "hidden"
    capability = "transducer"
    options_cls = TransducerOptions
    selective_options: ClassVar[tuple[str, ...]] = ()
    streaming_session = TransducerStreamingSession
    selective_options: ClassVar[tuple[str, ...]] = ("hotwords", "hotwords_score")

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or TransducerOptions(), **kwargs)
        self.contexts = ContextCache(self.tokenizer, self.options.hotwords_score)
        self.predictor = model.predictor
        self.joiner = model.joiner
        self.unk_id = getattr(model.config, "unk_id", None)
        self._device_greedy = DeviceGreedy(self.predictor, self.joiner, self.unk_id,
                                           graphs=self.options.cuda_graphs)
        self._fused = FusedGreedy(self.predictor, self.joiner, self.unk_id)
        if self.options.fused and not self._fused.declared:
            raise ValueError(
                f"fused=true needs a stateless predictor and an additive joiner; "
                f"{type(self.predictor).__name__} / {type(self.joiner).__name__} declare no "
                "tensors for it: leave fused unset")
        if self.options.beam_size > 1 and self.predictor.label_window is None:
            raise ValueError(
                f"{type(self.predictor).__name__} is recurrent (no label window); modified "
                "beam search needs a label-window predictor: decode with beam_size=1")
        # a prompted encoder (its encoder_options carry ``language``) conditions the frames
        # the joint reads on each request's language (``model.apply_prompt``)
        self.prompted = "language" in getattr(model, "encoder_options", dict)()
        if self.prompted:
            self.selective_options = ("language", *self.selective_options)

    def validate_options(self, decoding: Any) -> None:
        super().validate_options(decoding)
        if self.prompted and decoding.language is not None:
            self.model.prompt_slots([decoding.language])  # an unknown language raises
        if decoding.hotwords_score is not None and not decoding.hotwords:
            raise ValueError("hotwords_score boosts a request's hotwords; it sets none")
        if self.contexts.get(decoding) is not None and self.options.beam_size < 2:
            raise ValueError("hotwords boost modified beam search; this engine decodes greedy "
                             "(beam_size=1): set -d beam_size=4")

    def condition(self, hidden: torch.Tensor, languages: list[str | None]) -> torch.Tensor:
        """The encoder frames the joint reads: prompted on each row's language, if the model
        is prompted."""
        return self.model.apply_prompt(hidden, languages) if self.prompted else hidden

    def n_best_limit(self) -> tuple[int, str]:
        return self.options.beam_size, "raise beam_size"

    def search(self, hidden: torch.Tensor, lens: torch.Tensor | None, nbest: int,
               contexts: list[Any] | None = None) -> list[list[TransducerHypothesis]]:
        """hidden (B, T', C), lens (B,) -> per row up to ``nbest`` hypotheses, best first;
        ``contexts``: per row its hotwords graph (beam search only)."""
        if lens is None:
            lens = torch.full((hidden.shape[0],), hidden.shape[1], dtype=torch.int64)
        opt = self.options
        if opt.beam_size == 1 and self._use_fused(hidden):
            hyps = self._fused.search(hidden, lens, opt.max_sym_per_frame)
            if hyps is not None:  # None: a row overflowed, or no kernel served; the loop serves
                return [[h] for h in hyps]
        if opt.beam_size == 1 and hidden.is_cuda:  # no host round trip per frame
            hyps = self._device_greedy.search(hidden, lens, opt.max_sym_per_frame)
            return [[h] for h in hyps]
        if opt.beam_size == 1:  # the host loop: the oracle, and the CPU's path
            hyps = greedy_search(self.predictor, self.joiner, hidden, lens,
                                 max_sym_per_frame=opt.max_sym_per_frame, unk_id=self.unk_id)
            return [[h] for h in hyps]
        return modified_beam_search(self.predictor, self.joiner, hidden, lens,
                                    beam=opt.beam_size, n_best=nbest, unk_id=self.unk_id,
                                    contexts=contexts)

    def _use_fused(self, hidden: torch.Tensor) -> bool:
        # Where the CUDA kernel does not serve (torch backend, a gap), oasr.ops counts it and
        # the fused search returns None: the graphed loop below serves.
        return bool(self.options.fused) and self._fused.declared

    def text(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids)).strip() if self.tokenizer is not None else ""

    def build(self, request: Request, ranked: Sequence[TransducerHypothesis], num_frames: int,
              n_best: int, clock: Any) -> RequestOutput:
        best = ranked[0] if ranked else TransducerHypothesis([])
        ids = list(best.tokens)
        out = RequestOutput(request_id=request.request_id, text=self.text(ids), token_ids=ids,
                            finish_reason="stop", metadata=request.metadata)
        if n_best > 1:
            out.nbest_texts = [self.text(h.tokens) for h in ranked[:n_best]]
        probs = torch.tensor(best.probs, dtype=torch.float64).numpy()
        if request.decoding.word_timestamps:
            if clock is None:  # admission refuses this; a direct caller gets a clear error
                raise ValueError("word timings need the frame clock (FrameClock.resolve)")
            starts, ends = emission_spans(best.frames, num_frames)
            fill_word_timings(out, self.tokenizer, ids, starts, ends, probs, clock)
        else:
            out.confidence = mean_posterior(probs)
        return out

    def decode_offline(self, hidden: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> list[RequestOutput]:
        """hidden (B, T', C), lens (B,) encoder frames -> one output per request."""
        return self.search_offline(hidden, lens, requests)()

    def search_offline(self, hidden: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> Callable[[], list[RequestOutput]]:
        wanted = [r.decoding.n_best or self.options.nbest for r in requests]
        hidden = self.condition(hidden, [r.decoding.language for r in requests])
        contexts = [self.contexts.get(r.decoding) for r in requests]
        rows = self.search(hidden, lens, max(wanted),
                           contexts if any(c is not None for c in contexts) else None)
        frames = ([hidden.shape[1]] * hidden.shape[0] if lens is None
                  else lens.detach().cpu().tolist())
        clock = self.clock
        return lambda: [self.build(r, ranked, int(frames[b]), wanted[b], clock)
                        for b, (r, ranked) in enumerate(zip(requests, rows))]
