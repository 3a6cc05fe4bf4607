"""The ``ctc_wfst`` family's streaming session: each stream's WFST search continued chunk by
chunk (``oasr._C.wfst.Decoder``: the same search as offline, its tokens kept between chunks),
so a stream's final hypothesis is the offline one for the same log-probs.

``best()`` is the best path so far, chosen as the offline search chooses (among tokens in a
final state when there are any). No token is reported stable before the utterance ends
(``stable_prefix`` is 0): a later frame can still change any word of a WFST path. A stream keeps
its utterance's log-probs to read the tokens' posteriors; an endpoint (``reset``) drops them.
Streams carry no hot words (a stream has no request options to name them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oasr.engine.decode.streaming import StreamingSession
from oasr.graphs.search import WfstPath, read_tokens
from oasr.native import native

__all__ = ["CtcWfstStreamingSession", "WfstHypothesis", "WfstStream"]


@dataclass
class WfstHypothesis:
    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0  # minus the path's cost
    words: list[str] = field(default_factory=list)


class WfstStream:
    """One stream's search over ``strategy``'s graph and options."""

    def __init__(self, strategy: Any) -> None:
        self.graph = strategy.graph
        self.blank = strategy.blank
        self.decoder = native("wfst").Decoder(self.graph.graph.native(),
                                              strategy.search_options.native(), None)
        self.chunks: list[np.ndarray] = []

    def reset(self) -> None:
        self.decoder.reset()
        self.chunks = []

    def feed(self, log_probs: np.ndarray) -> None:
        lp = np.ascontiguousarray(log_probs, dtype=np.float32)
        if len(lp):
            self.decoder.advance(lp)
            self.chunks.append(lp)

    def path(self) -> WfstPath:
        return WfstPath.from_native(self.decoder.best_path(True))

    def best(self) -> WfstHypothesis:
        path = self.path()
        if not path.ok:
            return WfstHypothesis()
        tokens, frames = read_tokens(path, self.blank, self.graph.info.token_rule)
        lp = np.concatenate(self.chunks) if self.chunks else np.zeros((0, 1), np.float32)
        nxt = np.minimum(frames + 1, len(lp) - 1)
        probs = np.exp(np.maximum(lp[frames, tokens], lp[nxt, tokens]).astype(np.float64))
        return WfstHypothesis(tokens.tolist(), frames.tolist(), probs.tolist(), -path.cost,
                              self.graph.word_text(path.words))

    def stable_prefix(self) -> int:
        return 0


class CtcWfstStreamingSession(StreamingSession):
    name = "ctc_wfst"

    def __init__(self, strategy: Any) -> None:
        super().__init__(strategy)
        if not callable(getattr(strategy.model, "ctc_log_probs", None)):
            raise ValueError(f"{type(strategy.model).__name__} has no CTC head (ctc_log_probs); "
                             "decode it with its own family")
        self.model = strategy.model

    def new_search(self) -> WfstStream:
        return WfstStream(self.strategy)

    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None:
        lp = self.model.ctc_log_probs(out).detach().float().cpu().numpy()
        for r, search in enumerate(searches):
            search.feed(lp[r, :int(out_lens[r])])
