"""CTC searches that continue across chunks: the ``ctc`` family's greedy path and prefix beam
(WeNet's ``ctc_prefix_beam_search``, the statement in oasr/csrc/host/ctc/prefix_beam.h) with their
state kept per stream, so feeding a stream's log-probs chunk by chunk gives the hypotheses the
offline search gives on the whole sequence.

``feed(log_probs (T, V))`` advances by T frames; ``best()`` is the current best hypothesis
(tokens, each token's emitting frame and its posterior there, score). Frames are counted
from the stream's first fed frame. Blank skipping (``blank_skip_threshold < 1``) is not served
here: it decides per frame from the next frame, which a chunk boundary hides.

``CtcStreamingSession`` is the ``ctc`` family's streaming session (``oasr.engine.decode.
streaming``): the model's CTC head (``ctc_log_probs``) over a cohort's encoder output, then
each stream's greedy or prefix-beam search (the family's ``beam_size``).

Hotwords (``context``, a ``hotwords.ContextGraph``): the prefix beam as WeNet runs it with a
context graph. A prefix carries the graph state its tokens reached and the bonus they earned;
the beam is pruned on acoustic score + bonus, the acoustic scores themselves stay pure. The
final ranking takes back the bonus of a phrase still half matched (``ContextGraph.finish``),
as icefall's finalization does, and reports score + bonus. Without a context the search is
unchanged. The ``ctc`` family decodes a request with hotwords through this search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oasr.engine.decode.hotwords import ROOT, ContextGraph
from oasr.engine.decode.streaming import StreamingSession

NEG_INF = -math.inf


def _logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclass
class CtcHypothesis:
    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # each token's posterior at its frame
    score: float = 0.0


class CtcGreedyStream:
    """Best path: each frame's argmax, repeats merged, blanks dropped; a token's frame is the
    first of its run."""

    def __init__(self, blank: int = 0) -> None:
        self.blank = blank
        self.reset()

    def reset(self) -> None:
        self.hyp = CtcHypothesis()
        self.prev = self.blank
        self.frame = 0

    def feed(self, log_probs: np.ndarray) -> None:
        if len(log_probs) == 0:
            return
        best = np.argmax(log_probs, axis=-1)
        self.feed_argmax(best, np.asarray(log_probs)[np.arange(len(best)), best])

    def feed_argmax(self, best: np.ndarray, best_lp: np.ndarray | None = None) -> None:
        """The per-frame argmax ids (T,) (computed on the device for a batch), and optionally
        their log-probs for the score."""
        for i, tok in enumerate(best.tolist()):
            if tok != self.blank and tok != self.prev:
                self.hyp.tokens.append(tok)
                self.hyp.frames.append(self.frame + i)
                self.hyp.probs.append(math.exp(best_lp[i]) if best_lp is not None else math.nan)
            self.prev = tok
        if best_lp is not None:
            self.hyp.score += float(np.sum(best_lp, dtype=np.float64))
        self.frame += len(best)

    def best(self) -> CtcHypothesis:
        return self.hyp

    def stable_prefix(self) -> int:
        """The best path never rewrites an emitted token."""
        return len(self.hyp.tokens)


@dataclass
class _Prefix:
    pb: float = NEG_INF
    pnb: float = NEG_INF
    vb: float = NEG_INF  # Viterbi: the best single path ending in blank / in the last token
    vnb: float = NEG_INF
    frames_b: tuple[tuple[int, float], ...] = ()  # (frame, posterior) per token
    frames_nb: tuple[tuple[int, float], ...] = ()
    ctx_state: int = ROOT  # hotwords: the context graph state the prefix reached
    ctx_score: float = 0.0  # and the bonus its tokens earned

    @property
    def score(self) -> float:
        return _logaddexp(self.pb, self.pnb)


class CtcPrefixBeamStream:
    """The prefix beam, one frame at a time, its beam kept between chunks."""

    def __init__(self, beam_size: int, blank: int = 0,
                 context: ContextGraph | None = None) -> None:
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        self.beam_size = beam_size
        self.blank = blank
        self.context = context
        self.reset()

    def reset(self) -> None:
        self.beam: list[tuple[tuple[int, ...], _Prefix]] = [((), _Prefix(pb=0.0, vb=0.0))]
        self.frame = 0

    def feed(self, log_probs: np.ndarray) -> None:
        lp = np.asarray(log_probs, dtype=np.float64)
        for row in lp:
            self._frame(row, self.frame)
            self.frame += 1

    def _frame(self, row: np.ndarray, t: int) -> None:
        k = min(self.beam_size, row.shape[0])
        top = np.argsort(-row, kind="stable")[:k]  # descending; a tie goes to the lower id
        nxt: dict[tuple[int, ...], _Prefix] = {}

        def get(key: tuple[int, ...], parent: _Prefix, label: int | None = None) -> _Prefix:
            """``key``'s entry; a new one inherits ``parent``'s context, moved by ``label``
            when ``key`` extends the parent's prefix by it (every way into a key comes from
            the same prefix, so a key has one context)."""
            p = nxt.get(key)
            if p is None:
                p = nxt[key] = _Prefix(ctx_state=parent.ctx_state, ctx_score=parent.ctx_score)
                if label is not None and self.context is not None:
                    bonus, p.ctx_state = self.context.step(parent.ctx_state, label)
                    p.ctx_score += bonus
            return p

        for u in top.tolist():
            p = float(row[u])
            for h, cur in self.beam:
                v_any, f_any = ((cur.vb, cur.frames_b) if cur.vb >= cur.vnb
                                else (cur.vnb, cur.frames_nb))
                if u == self.blank:
                    n = get(h, cur)
                    n.pb = _logaddexp(n.pb, cur.score + p)
                    if v_any + p > n.vb:
                        n.vb, n.frames_b = v_any + p, f_any
                elif h and u == h[-1]:
                    n = get(h, cur)
                    n.pnb = _logaddexp(n.pnb, cur.pnb + p)
                    if cur.vnb + p > n.vnb:
                        n.vnb, n.frames_nb = cur.vnb + p, cur.frames_nb
                    e = get(h + (u,), cur, u)
                    e.pnb = _logaddexp(e.pnb, cur.pb + p)
                    if cur.vb + p > e.vnb:
                        e.vnb, e.frames_nb = cur.vb + p, cur.frames_b + ((t, math.exp(p)),)
                else:
                    e = get(h + (u,), cur, u)
                    e.pnb = _logaddexp(e.pnb, cur.score + p)
                    if v_any + p > e.vnb:
                        e.vnb, e.frames_nb = v_any + p, f_any + ((t, math.exp(p)),)
        live = [(h, q) for h, q in nxt.items() if q.score > NEG_INF]
        # stable: first touched wins a tie (no context: a bonus of 0.0 changes no score)
        live.sort(key=lambda hq: -(hq[1].score + hq[1].ctx_score))
        self.beam = live[:self.beam_size]

    def nbest(self, n: int | None = None) -> list[CtcHypothesis]:
        ranked = self.beam
        if self.context is not None:  # a half-matched phrase earns nothing in the end
            finish = self.context.finish
            ranked = sorted(ranked, key=lambda hq: -(hq[1].score + hq[1].ctx_score
                                                     + finish(hq[1].ctx_state)))
        out = []
        for h, q in ranked[:n or self.beam_size]:
            path = q.frames_b if q.vb >= q.vnb else q.frames_nb
            score = q.score
            if self.context is not None:
                score += q.ctx_score + self.context.finish(q.ctx_state)
            out.append(CtcHypothesis(list(h), [f for f, _ in path], [p for _, p in path],
                                     score))
        return out

    def best(self) -> CtcHypothesis:
        hyps = self.nbest(1)
        return hyps[0] if hyps else CtcHypothesis()

    def stable_prefix(self) -> int:
        """Tokens every live prefix shares: no later frame can change them."""
        if not self.beam:
            return 0
        first = self.beam[0][0]
        n = len(first)
        for h, _ in self.beam[1:]:
            n = min(n, len(h))
            while n and h[:n] != first[:n]:
                n -= 1
        return n


class CtcStreamingSession(StreamingSession):
    name = "ctc"

    def __init__(self, strategy: Any) -> None:
        super().__init__(strategy)
        model, options = strategy.model, strategy.options
        if not callable(getattr(model, "ctc_log_probs", None)):
            raise ValueError(f"{type(model).__name__} has no CTC head (ctc_log_probs); decode "
                             "it with its own family")
        if options.blank_skip_threshold < 1.0:
            raise ValueError("blank_skip_threshold < 1 is not served while streaming (it reads "
                             "the next frame across a chunk boundary); leave it at 1.0")
        self.model = model
        self.blank = strategy.blank
        self.beam_size = options.beam_size

    def new_search(self) -> CtcGreedyStream | CtcPrefixBeamStream:
        if self.beam_size <= 1:
            return CtcGreedyStream(self.blank)
        return CtcPrefixBeamStream(self.beam_size, self.blank)

    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None:
        lp = self.model.ctc_log_probs(out).float().cpu().numpy()
        for r, search in enumerate(searches):
            search.feed(lp[r, :int(out_lens[r])])
