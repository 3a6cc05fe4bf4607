"""The heads the chunk-wise policy drives: a stream's search over its encoder frames, chunk by
chunk.

One interface for every head: ``new_search()`` builds a stream's search (``feed`` / ``best`` /
``stable_prefix`` / ``reset``, its hypothesis carrying ``tokens``, ``frames`` (encoder frames
from the utterance's start) and ``probs``); ``feed(searches, out, out_lens)`` advances a
cohort's searches by one step's encoder output (B, T', C), row ``b`` the next ``out_lens[b]``
frames of ``searches[b]``'s stream, conditioned on ``languages[b]`` (the stream's option) where
the head serves conditioning (``conditions``; others are refused before a stream opens).

- ``ctc``: the model's CTC head (``ctc_log_probs``) -> log-probs -> CTC greedy or the prefix
  beam (``beam_size``) per stream.
- ``transducer``: the predictor and joiner -> greedy with the predictor state threaded across
  chunks, the cohort's states stacked into one batched search (``feed_streams``); a prompted
  model's frames are first conditioned on each stream's language (the family's ``condition``).

``build_head(engine)`` picks the head from the engine's decode family.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.engine.decode.ctc_streaming import CtcGreedyStream, CtcPrefixBeamStream
from oasr.engine.decode.transducer_streaming import TransducerGreedyStream, feed_streams

__all__ = ["CtcHead", "StreamHead", "TransducerHead", "build_head"]


class StreamHead:
    """A decoding head under the chunk-wise policy."""

    name = ""
    conditions: tuple[str, ...] = ()  # stream options the head acts on (``language``)

    def new_search(self) -> Any:
        raise NotImplementedError

    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None:
        raise NotImplementedError


class CtcHead(StreamHead):
    name = "ctc"

    def __init__(self, model: Any, options: Any) -> None:
        if not callable(getattr(model, "ctc_log_probs", None)):
            raise ValueError(f"{type(model).__name__} has no CTC head (ctc_log_probs); decode "
                             "it with its own family")
        if float(getattr(options, "blank_skip_threshold", 1.0)) < 1.0:
            raise ValueError("blank_skip_threshold < 1 is not served while streaming (it reads "
                             "the next frame across a chunk boundary); leave it at 1.0")
        self.model = model
        self.blank = int(model.config.blank_id)
        self.beam_size = int(getattr(options, "beam_size", 1))

    def new_search(self) -> Any:
        if self.beam_size <= 1:
            return CtcGreedyStream(self.blank)
        return CtcPrefixBeamStream(self.beam_size, self.blank)

    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None:
        lp = self.model.ctc_log_probs(out).float().cpu().numpy()
        for r, search in enumerate(searches):
            search.feed(lp[r, :int(out_lens[r])])


class TransducerHead(StreamHead):
    name = "transducer"

    def __init__(self, model: Any, options: Any, strategy: Any = None) -> None:
        if getattr(model, "predictor", None) is None or getattr(model, "joiner", None) is None:
            raise ValueError(f"{type(model).__name__} has no transducer predictor and joiner")
        beam = int(getattr(options, "beam_size", 1))
        if beam != 1:
            raise ValueError(f"beam_size={beam}: a transducer streams with greedy search only "
                             "(beam_size=1)")
        self.predictor, self.joiner = model.predictor, model.joiner
        self.max_sym_per_frame = int(getattr(options, "max_sym_per_frame", 1))
        self.unk_id = getattr(model.config, "unk_id", None)
        self.strategy = strategy
        if getattr(strategy, "prompted", False):
            self.conditions = ("language",)

    def new_search(self) -> TransducerGreedyStream:
        return TransducerGreedyStream(self.predictor, self.joiner, self.max_sym_per_frame,
                                      self.unk_id)

    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None:
        if self.conditions:
            out = self.strategy.condition(out, languages)
        feed_streams(searches, out, out_lens.to(out.device))


_HEADS: dict[str, type[StreamHead]] = {"ctc": CtcHead, "transducer": TransducerHead}


def build_head(engine: Any) -> StreamHead:
    """The head for the engine's decode family; other families are refused by name."""
    family = getattr(engine.strategy, "name", None)
    cls = _HEADS.get(family)
    if cls is None:
        raise ValueError(f"{type(engine.model).__name__} streams chunk-wise but decode family "
                         f"{family!r} has no streaming head (served: {', '.join(_HEADS)}); "
                         "pick one with --decode-method")
    if cls is TransducerHead:
        return cls(engine.model, engine.strategy.options, engine.strategy)
    return cls(engine.model, engine.strategy.options)
