"""The ``tdt`` family: token-and-duration transducer greedy search.

Offline and non-incremental: one ``decode_offline`` call per micro-batch over the encoder's
hidden states. On CUDA the search is ``tdt_graph.TdtDeviceGreedy`` (the loop on the device,
replayed from CUDA graphs); elsewhere ``tdt_search.tdt_greedy``, its oracle. Greedy only:
``beam_size`` above 1 is refused (TDT beam search is not implemented). Word timings come from
the emission frames: a token spans from its frame to the next token's (the last one to the end
of the row), as the CTC family times words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from oasr.engine.decode.alignment import emission_spans, fill_word_timings
from oasr.engine.decode.ctc import mean_posterior
from oasr.engine.decode.frame_sync import FrameSyncStrategy
from oasr.engine.decode.options import option
from oasr.engine.decode.tdt_graph import TdtDeviceGreedy
from oasr.engine.decode.tdt_search import TdtHypothesis, tdt_greedy
from oasr.engine.request import Request, RequestOutput

__all__ = ["TdtDecodeStrategy", "TdtOptions"]


@dataclass
class TdtOptions:
    beam_size: int = option(1, doc="1 (greedy) only: TDT beam search is not implemented.")
    max_symbols_per_step: int | None = option(
        None, doc="Labels one frame may emit before a zero duration is forced to 1; none: "
                  "the checkpoint's (config.max_symbols_per_step).")
    cuda_graphs: bool = option(True, doc="On CUDA: replay the search's steps from CUDA graphs "
                                         "(false: the same device loop, eager).")

    def validate(self) -> None:
        if self.beam_size != 1:
            raise ValueError(f"the tdt family decodes greedily; beam_size={self.beam_size} is "
                             "not implemented (use beam_size=1)")
        if self.max_symbols_per_step is not None and self.max_symbols_per_step < 1:
            raise ValueError(f"max_symbols_per_step must be >= 1, got "
                             f"{self.max_symbols_per_step}")


class TdtDecodeStrategy(FrameSyncStrategy):
    name = "tdt"
    consumes = "hidden"
    capability = "tdt"
    options_cls = TdtOptions
    selective_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or TdtOptions(), **kwargs)
        self.options.validate()
        cfg = model.config
        self.blank = int(cfg.blank_id)
        self.vocab_size = int(cfg.vocab_size)
        self.durations = [int(d) for d in cfg.durations]
        self.max_symbols = int(self.options.max_symbols_per_step or cfg.max_symbols_per_step)
        self._device_greedy = TdtDeviceGreedy(model.predictor, model.joiner, self.blank,
                                              self.vocab_size, self.durations,
                                              graphs=self.options.cuda_graphs)

    def search(self, hidden: torch.Tensor, lens: torch.Tensor | None) -> list[TdtHypothesis]:
        if lens is None:
            lens = torch.full((hidden.shape[0],), hidden.shape[1], dtype=torch.int64)
        if hidden.is_cuda:  # no host round trip per step
            return self._device_greedy.search(hidden, lens, self.max_symbols)
        return tdt_greedy(self.model.predictor, self.model.joiner, hidden, lens, self.blank,
                          self.vocab_size, self.durations, self.max_symbols)

    def decode_offline(self, hidden: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> list[RequestOutput]:
        return self.search_offline(hidden, lens, requests)()

    def search_offline(self, hidden: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> Callable[[], list[RequestOutput]]:
        hyps = self.search(hidden, lens)
        n = (np.full(len(hyps), hidden.shape[1]) if lens is None
             else lens.detach().cpu().numpy())
        return lambda: self.build_outputs(requests, hyps, n)

    def build_outputs(self, requests: list[Request], hyps: list[Any], n: np.ndarray
                      ) -> list[RequestOutput]:
        """One output per request from its row's hypothesis (host work only)."""
        clock = self.clock
        outs = []
        for b, (req, hyp) in enumerate(zip(requests, hyps)):
            text = self.tokenizer.decode(hyp.tokens).strip() if self.tokenizer else ""
            out = RequestOutput(request_id=req.request_id, text=text, token_ids=list(hyp.tokens),
                                finish_reason="stop", metadata=req.metadata)
            probs = np.asarray(hyp.probs, dtype=np.float32)
            if req.decoding.word_timestamps:
                if clock is None:
                    raise ValueError("word timings need the frame clock (FrameClock.resolve)")
                starts, ends = emission_spans(hyp.frames, int(n[b]))
                fill_word_timings(out, self.tokenizer, hyp.tokens, starts, ends, probs, clock)
            else:
                out.confidence = mean_posterior(probs)
            outs.append(out)
        return outs
