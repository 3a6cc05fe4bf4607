"""The ``ctc`` family: greedy or prefix beam search over CTC log-probs.

The model's fused encoder + CTC head (``forward_offline``) hands over log-probs (B, T', V). On
CUDA the search runs on the device (``oasr.kernels.ctc_cuda``, oasr/csrc/kernels/ctc/) and only the
hypotheses come back, in one copy; a beam wider than the kernel serves is the declared gap
``ctc-beam-width`` and runs on the CPU, counted. On the CPU the search runs in ``oasr._C.ctc``
(oasr/csrc/host/ctc/) with the GIL released, one row per thread up to torch's thread count. Both are
WeNet's ``ctc_prefix_beam_search`` (the statement is in oasr/csrc/host/ctc/prefix_beam.h); on the
CPU beam width 1 is the greedy best path, which the GPU search at width 1 equals.

Word timings are recorded, not derived: the search keeps each token's emitting frame on the
hypothesis' best path as it extends it, and each token's posterior is read at that frame (max
over [t, t + 1]). ``alignment.fill_word_timings`` turns them into words; the frame clock comes
from the model and the frontend, and a request asking for word timings is refused at admission
when either does not declare it.

Hotwords (a request's ``hotwords``, each matched token worth ``hotwords_score``, the family's
by default): the prefix beam with a context graph (``hotwords.py``; WeNet's
``ctc_prefix_beam_search`` with a context graph, icefall's scoring). Neither native search
carries the graph, so such a request runs the Python prefix beam of ``ctc_streaming.py`` (the
same search, pinned equal to the native one without hotwords) on the host; on CUDA that is the
declared gap ``ctc-hotwords``, counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from oasr import ops
from oasr.engine.decode.alignment import FrameClock, emission_spans, fill_word_timings
from oasr.engine.decode.ctc_streaming import CtcPrefixBeamStream, CtcStreamingSession
from oasr.engine.decode.encoder_chunks import EncoderChunkOptions
from oasr.engine.decode.frame_sync import FrameSyncStrategy
from oasr.engine.decode.hotwords import ContextGraph, build_context
from oasr.engine.decode.options import option
from oasr.engine.request import Request, RequestOutput
from oasr.native import native
from oasr.ops import CUDA, route
from oasr.ops.counting import count

# The GPU search registers when its binding is imported, at the first routed call.
_CTC_SEARCH = route("ctc_prefix_beam", "ctc-beam-width", scope=CUDA,
                    provider="oasr.kernels.ctc_cuda")
CTC_HOTWORDS = ops.declare_gap(ops.KernelGap(
    id="ctc-hotwords",
    what="CTC prefix beam search with hotwords (a context graph per prefix): neither the CUDA "
         "kernel nor the C++ CPU search carries the graph",
    fix="carry a context-graph state and bonus per prefix in oasr/csrc/kernels/ctc/"
        "prefix_beam.cuh and oasr/csrc/host/ctc/prefix_beam.h (the Python prefix beam serves it)",
))
DEFAULT_HOTWORDS_SCORE = 1.5  # sherpa-onnx's default bonus per token


@dataclass
class CtcOptions(EncoderChunkOptions):
    beam_size: int = option(10, doc="Prefix beam width: each frame's top beam_size tokens extend "
                                    "the top beam_size prefixes (WeNet's "
                                    "ctc_prefix_beam_search); 1 is the greedy best path.")
    blank_skip_threshold: float = option(1.0, doc="Beam search skips frames whose blank "
                                                  "probability exceeds this (a skipped frame "
                                                  "between two equal tokens is replayed); 1.0 "
                                                  "never skips.")
    nbest: int = option(1, doc="Hypotheses returned per row (<= beam_size); > 1 fills "
                               "nbest_texts. A request's n_best overrides it.")
    hotwords_score: float = option(DEFAULT_HOTWORDS_SCORE,
                                   doc="Bonus per matched token of a request's hotwords (a "
                                       "request's hotwords_score overrides it).")

    def validate(self) -> None:
        validate_search(self.beam_size, self.blank_skip_threshold)
        if self.hotwords_score < 0:
            raise ValueError(f"hotwords_score must be >= 0, got {self.hotwords_score}")
        if not 1 <= self.nbest <= self.beam_size:
            raise ValueError(f"nbest must be in [1, beam_size={self.beam_size}], got "
                             f"{self.nbest}")


def validate_search(beam_size: int, blank_skip_threshold: float) -> None:
    """The search knobs every CTC family's options carry."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if not 0.0 < blank_skip_threshold <= 1.0:
        raise ValueError("blank_skip_threshold must be in (0, 1] (1.0: never skip), got "
                         f"{blank_skip_threshold}")


def host_log_probs(log_probs: torch.Tensor, lens: torch.Tensor | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(B, T, V) log-probs and (B,) lengths as contiguous float32 / int64 host arrays; no
    ``lens`` means every row is ``T`` frames."""
    lp = log_probs.detach().to("cpu", torch.float32).contiguous().numpy()
    if lens is None:
        n = np.full(lp.shape[0], lp.shape[1], dtype=np.int64)
    else:
        n = lens.detach().to("cpu", torch.int64).numpy()
    return lp, n


def ctc_search(log_probs: np.ndarray, lens: np.ndarray, blank: int, beam_size: int,
               blank_skip_threshold: float, nbest: int) -> list[list[Any]]:
    """Per row, up to ``nbest`` ``oasr._C.ctc.Hypothesis`` best first (greedy when
    ``beam_size == 1``)."""
    ctc = native("ctc")
    threads = max(1, min(len(lens), torch.get_num_threads()))
    if beam_size == 1:
        return [[h] for h in ctc.greedy(log_probs, lens, blank, num_threads=threads)]
    return ctc.prefix_beam(log_probs, lens, blank, beam_size, blank_skip_threshold, nbest,
                           num_threads=threads)


def cuda_search(log_probs: torch.Tensor, lens: torch.Tensor | None, blank: int, beam_size: int,
                blank_skip_threshold: float, nbest: int) -> list[list[Any]] | None:
    """The search on the log-probs' CUDA device; ``None`` where the kernel does not serve it:
    CPU tensors (out of scope), beams past the kernel or no CUDA toolchain to build it (the
    declared gaps), ``OASR_LAYERS_BACKEND=torch``; every case counted by ``oasr.ops``."""
    search = _CTC_SEARCH.select(log_probs, beam_size, nbest)
    if search is None:
        return None
    return search(log_probs, lens, blank=blank, beam_size=beam_size,
                  blank_skip_threshold=blank_skip_threshold, nbest=nbest)


@dataclass
class BoostedHypothesis:
    """A hotword-boosted search's hypothesis, shaped as the native ``Hypothesis``."""

    tokens: np.ndarray
    frames: np.ndarray
    probs: np.ndarray
    score: float


def boosted_search(log_probs: np.ndarray, num_frames: int, blank: int, beam_size: int,
                   context: ContextGraph, nbest: int) -> list[BoostedHypothesis]:
    """One row's prefix beam (T, V) over its first ``num_frames`` frames with ``context``."""
    search = CtcPrefixBeamStream(beam_size, blank, context)
    search.feed(log_probs[:num_frames])
    return [BoostedHypothesis(np.asarray(h.tokens, dtype=np.int64),
                              np.asarray(h.frames, dtype=np.int64),
                              np.asarray(h.probs, dtype=np.float64), h.score)
            for h in search.nbest(nbest)]


class ContextCache:
    """Requests' context graphs, built once per (hotwords, score) and tokenizer."""

    def __init__(self, tokenizer: Any, default_score: float) -> None:
        self.tokenizer = tokenizer
        self.default_score = default_score
        self._graphs: dict[tuple, ContextGraph | None] = {}

    def get(self, decoding: Any) -> ContextGraph | None:
        score = (self.default_score if decoding.hotwords_score is None
                 else decoding.hotwords_score)
        key = (decoding.hotwords, score)
        if key not in self._graphs:
            if len(self._graphs) > 256:
                self._graphs.clear()
            self._graphs[key] = build_context(self.tokenizer, decoding.hotwords, score)
        return self._graphs[key]


def best_of(row: Sequence[Any]) -> Any:
    """A row's first hypothesis; an empty one when the search kept none (every path of the
    row had probability zero)."""
    return row[0] if row else native("ctc").Hypothesis()


def mean_posterior(probs: np.ndarray) -> float | None:
    """The utterance confidence: the tokens' mean posterior, accumulated left to right as the
    word-timing pass does (so a row's confidence does not depend on whether it asked for
    words)."""
    if not len(probs):
        return None
    return float(np.cumsum(probs, dtype=np.float64)[-1] / len(probs))


class CtcOutputs:
    """Hypotheses -> ``RequestOutput``: text, n-best texts, confidence and word timings."""

    def __init__(self, tokenizer: Any, clock: FrameClock | None) -> None:
        self.tokenizer = tokenizer
        self.clock = clock

    def text(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids).strip() if self.tokenizer is not None else ""

    def build(self, request: Request, ranked: Sequence[Any], num_frames: int,
              n_best: int = 1) -> RequestOutput:
        """``ranked`` is the row's hypotheses in output order: the first is the chosen one, the
        first ``n_best`` fill ``nbest_texts`` when ``n_best > 1``."""
        best = best_of(ranked)
        ids = best.tokens.tolist()
        out = RequestOutput(request_id=request.request_id, text=self.text(ids), token_ids=ids,
                            finish_reason="stop", metadata=request.metadata)
        if n_best > 1:
            out.nbest_texts = [self.text(h.tokens.tolist()) for h in ranked[:n_best]]
        if request.decoding.word_timestamps:
            if self.clock is None:  # admission refuses this; a direct caller gets a clear error
                raise ValueError("word timings need the frame clock (FrameClock.resolve)")
            starts, ends = emission_spans(best.frames, num_frames)
            fill_word_timings(out, self.tokenizer, ids, starts, ends, best.probs, self.clock)
        else:
            out.confidence = mean_posterior(best.probs)
        return out


class CtcDecodeStrategy(FrameSyncStrategy):
    """Frame-synchronous, non-incremental: one ``decode_offline`` call per micro-batch."""

    name = "ctc"
    consumes = "log_probs"
    capability = "ctc"
    options_cls = CtcOptions
    selective_options: ClassVar[tuple[str, ...]] = ()
    streaming_session = CtcStreamingSession
    selective_options: ClassVar[tuple[str, ...]] = ("hotwords", "hotwords_score")

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or CtcOptions(), **kwargs)
        self.blank = int(model.config.blank_id)  # required by the capability check
        # A subclass that does not declare hotwords (the rescoring family) refuses them.
        self.contexts = (ContextCache(self.tokenizer, self.options.hotwords_score)
                         if "hotwords" in self.selective_options else None)

    def validate_options(self, decoding: Any) -> None:
        super().validate_options(decoding)
        if self.contexts is None:
            return
        if decoding.hotwords_score is not None and not decoding.hotwords:
            raise ValueError("hotwords_score boosts a request's hotwords; it sets none")
        if self.contexts.get(decoding) is None:  # builds (and checks) the phrases
            return
        if self.options.beam_size < 2:
            raise ValueError("hotwords boost the prefix beam search; this engine decodes "
                             "greedy (beam_size=1): set -d beam_size=10")
        if self.options.blank_skip_threshold < 1.0:
            raise ValueError("hotword rows run the Python prefix beam, which skips no blank "
                             "frames: set -d blank_skip_threshold=1.0")

    def n_best_limit(self) -> tuple[int, str]:
        return self.options.beam_size, "raise beam_size"

    def search(self, log_probs: torch.Tensor, lens: torch.Tensor | None, nbest: int
               ) -> tuple[np.ndarray, list[list[Any]]]:
        """log_probs (B, T', V), lens (B,) -> the rows' frame counts (B,) and, per row, up to
        ``nbest`` hypotheses best first, under this family's beam options."""
        opt = self.options
        rows = cuda_search(log_probs, lens, self.blank, opt.beam_size, opt.blank_skip_threshold,
                           nbest)
        if rows is not None:
            n = (np.full(log_probs.shape[0], log_probs.shape[1], dtype=np.int64) if lens is None
                 else lens.detach().to("cpu", torch.int64).numpy())
            return n, rows
        lp, n = host_log_probs(log_probs, lens)
        return n, ctc_search(lp, n, self.blank, opt.beam_size, opt.blank_skip_threshold, nbest)

    def build_outputs(self, requests: list[Request], rankings: Sequence[Sequence[Any]],
                      num_frames: np.ndarray, n_best: Sequence[int]) -> list[RequestOutput]:
        """One output per request from its row's hypotheses in output order."""
        outputs = CtcOutputs(self.tokenizer, self.clock)  # the clock resolved once per batch
        return [outputs.build(r, ranked, int(num_frames[b]), n_best[b])
                for b, (r, ranked) in enumerate(zip(requests, rankings))]

    def decode_offline(self, log_probs: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> list[RequestOutput]:
        """log_probs (B, T', V), lens (B,) encoder frames -> one output per request."""
        return self.search_offline(log_probs, lens, requests)()

    def search_offline(self, log_probs: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> Callable[[], list[RequestOutput]]:
        wanted = [r.decoding.n_best or self.options.nbest for r in requests]
        n, hyps = self.search(log_probs, lens, max(wanted))
        contexts = self.contexts
        boosted = [] if contexts is None else [
            (b, c) for b, c in enumerate(contexts.get(r.decoding) for r in requests)
            if c is not None]
        if boosted:
            lp, _ = host_log_probs(log_probs, lens)
            for b, context in boosted:
                if log_probs.is_cuda:
                    count(("gap", CTC_HOTWORDS.id))
                hyps[b] = boosted_search(lp[b], int(n[b]), self.blank, self.options.beam_size,
                                         context, wanted[b])
        return lambda: self.build_outputs(requests, hyps, n, wanted)
