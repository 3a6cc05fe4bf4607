"""The ``ctc_wfst`` family: CTC log-probs decoded through a WFST (a TLG built by ``oasr graph
build``, or a Kaldi / k2 graph), so a lexicon, an n-gram language model and hot words shape the
transcript.

The search is token passing with beam pruning, Kaldi's FasterDecoder (oasr/csrc/host/wfst/, the CPU
search, one row per thread); on CUDA the batched device search (``oasr.kernels.wfst_cuda``)
serves it, and what it does not serve is a declared gap run on the CPU, counted. One best path
per row (no lattice): ``n_best`` is 1.

A row's text is its path's words (the graph's output labels); its tokens are read off the
path's emitting arcs (``oasr.graphs.search``), each one's frame the first of its run, its
posterior ``max(p[t][tok], p[t + 1][tok])`` as the ``ctc`` family reads it. Word timings cut
the tokens into the words with the spellings the graph was built from (``NAME.lexicon.int``):
a word runs from its first token's frame to the next word's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from oasr.engine.decode.alignment import FrameClock, emission_spans, fill_word_timings
from oasr.engine.decode.ctc import host_log_probs, mean_posterior
from oasr.engine.decode.ctc_wfst_streaming import CtcWfstStreamingSession
from oasr.engine.decode.frame_sync import FrameSyncStrategy
from oasr.engine.decode.hotwords import hotword_phrases
from oasr.engine.decode.options import option
from oasr.engine.request import Request, RequestOutput
from oasr.graphs.boosting import HotwordGraph
from oasr.graphs.search import SearchOptions, WfstPath, decode_rows, read_tokens, segment_words
from oasr.graphs.store import GraphError, LoadedGraph, load_graph, resolve_graph
from oasr.ops import CUDA, route

__all__ = ["CtcWfstOptions", "CtcWfstDecodeStrategy", "HotwordCache", "WfstOutputs",
           "build_hotwords"]

# The GPU search registers when its binding is imported, at the first routed call.
_WFST_SEARCH = route("wfst_search", "wfst-search", scope=CUDA,
                     provider="oasr.kernels.wfst_cuda")


@dataclass
class CtcWfstOptions:
    graph: str = option("", doc="The decoding graph: a .fst path, or the name of a graph in the "
                                "model's bundle (graphs/NAME.fst, made by 'oasr graph build').")
    beam: float = option(16.0, doc="Search beam: tokens costing more than the best plus this "
                                   "are pruned (Kaldi's --beam).")
    max_active: int = option(7000, doc="At most this many tokens survive a frame (Kaldi's "
                                       "--max-active; the beam tightens to fit).")
    min_active: int = option(200, doc="At least this many tokens survive a frame when the beam "
                                      "would keep fewer (Kaldi's --min-active).")
    beam_delta: float = option(0.5, doc="Added to the beam max_active tightened it to, for the "
                                        "next frame (Kaldi's --beam-delta).")
    acoustic_scale: float = option(1.0, doc="Log-probs are multiplied by this against the graph's "
                                            "costs (a language-model weight of 1/scale).")
    blank_penalty: float = option(0.0, doc="Subtracted from the blank's log-prob before the "
                                           "scale: > 0 favours emitting units.")
    blank_skip_threshold: float = option(1.0, doc="Frames whose blank probability exceeds this "
                                                  "are not decoded (as the ctc family's); 1.0 "
                                                  "never skips.")
    hotwords_score: float = option(1.5, doc="A request's hot phrase earns this per unit of its "
                                            "words' spellings (log-prob units; a request's "
                                            "hotwords_score overrides it).")

    def validate(self) -> None:
        if not self.graph:
            raise ValueError("ctc_wfst needs a graph: -d graph=PATH.fst or the name of a graph "
                             "in the model's bundle ('oasr graph build' makes one)")
        if self.beam <= 0:
            raise ValueError(f"beam must be > 0, got {self.beam}")
        if not 1 < self.max_active or not 0 <= self.min_active < self.max_active:
            raise ValueError("need 0 <= min_active < max_active and max_active > 1, got "
                             f"min_active={self.min_active}, max_active={self.max_active}")
        if self.beam_delta < 0 or self.acoustic_scale <= 0:
            raise ValueError("beam_delta must be >= 0 and acoustic_scale > 0")
        if not 0.0 < self.blank_skip_threshold <= 1.0:
            raise ValueError("blank_skip_threshold must be in (0, 1] (1.0: never skip), got "
                             f"{self.blank_skip_threshold}")
        if self.hotwords_score < 0:
            raise ValueError(f"hotwords_score must be >= 0, got {self.hotwords_score}")

    def search(self, blank: int) -> SearchOptions:
        return SearchOptions(beam=self.beam, max_active=self.max_active,
                             min_active=self.min_active, beam_delta=self.beam_delta,
                             acoustic_scale=self.acoustic_scale, blank_penalty=self.blank_penalty,
                             blank=blank, blank_skip_threshold=self.blank_skip_threshold)


def build_hotwords(graph: LoadedGraph, hotwords: str | Sequence[str] | None,
                   score: float) -> HotwordGraph | None:
    """The boosting automaton of ``hotwords`` over the graph's words (``None``: none). A phrase
    word the graph cannot output is refused by name."""
    phrases = hotword_phrases(hotwords)
    if not phrases:
        return None
    ids, bonus = [], {}
    for phrase in phrases:
        labels = []
        for word in phrase.split():
            label = graph.words.ids.get(word)
            if label is None:
                raise GraphError(f"hotword {word!r} (in {phrase!r}) is not a word of graph "
                                 f"{graph.path}; add it to the lexicon and language model and "
                                 "rebuild the graph (words are matched exactly: mind the case)")
            spellings = (graph.spellings or {}).get(word)
            bonus[label] = score * (min(len(s) for s in spellings) if spellings else 1)
            labels.append(label)
        ids.append(labels)
    return HotwordGraph(ids, bonus)


class HotwordCache:
    """Requests' boosting automata over one graph, built once per (hotwords, score)."""

    def __init__(self, graph: LoadedGraph, default_score: float) -> None:
        self.graph, self.default_score = graph, default_score
        self._built: dict[tuple, Any] = {}

    def get(self, decoding: Any) -> Any:
        """The native boosting automaton of a request's hot words (``None``: it has none)."""
        score = (self.default_score if decoding.hotwords_score is None
                 else decoding.hotwords_score)
        key = (decoding.hotwords, score)
        if key not in self._built:
            if len(self._built) > 256:
                self._built.clear()
            hot = build_hotwords(self.graph, decoding.hotwords, score)
            self._built[key] = hot.native() if hot is not None else None
        return self._built[key]


def token_posteriors(log_probs: torch.Tensor, lens: np.ndarray,
                     rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Per row, each token's ``max(p[t][tok], p[t + 1][tok])`` (t + 1 within the row), read
    where the log-probs are, one gather for the batch."""
    sizes = [len(tokens) for tokens, _ in rows]
    if not sum(sizes):
        return [np.zeros(0) for _ in rows]
    b = np.repeat(np.arange(len(rows)), sizes)
    tok = np.concatenate([t for t, _ in rows])
    t0 = np.concatenate([f for _, f in rows])
    t1 = np.minimum(t0 + 1, np.asarray(lens, dtype=np.int64)[b] - 1)
    x = log_probs.detach()
    idx = [torch.from_numpy(v).to(x.device) for v in (b, t0, t1, tok)]
    lp = torch.maximum(x[idx[0], idx[1], idx[3]], x[idx[0], idx[2], idx[3]])
    probs = np.exp(lp.double().cpu().numpy())
    return list(np.split(probs, np.cumsum(sizes)[:-1]))


class WfstOutputs:
    """Best paths -> ``RequestOutput``: the graph's words as text, tokens, confidence and word
    timings."""

    def __init__(self, graph: LoadedGraph, blank: int, clock: FrameClock | None) -> None:
        self.graph, self.blank, self.clock = graph, blank, clock

    def tokens(self, path: WfstPath) -> tuple[np.ndarray, np.ndarray]:
        return read_tokens(path, self.blank, self.graph.info.token_rule)

    def pieces(self, tokens: np.ndarray, words: list[str]) -> list[str]:
        """Token pieces whose concatenation is the text, each word's characters spread over its
        tokens (so the shared word pass gives each word its tokens' span)."""
        starts = segment_words(tokens.tolist(), words, self.graph.spellings or {})
        if starts is None:
            raise GraphError(f"{self.graph.path}: a path's tokens are not its words' spellings "
                             f"({words[:5]}...); the lexicon beside the graph is not the one "
                             "it was built with")
        pieces = [""] * len(tokens)
        bounds = [*starts, len(tokens)]
        for i, word in enumerate(words):
            lo, hi = bounds[i], bounds[i + 1]
            cut = [word[j] for j in range(min(hi - lo, len(word)) - 1)]
            cut.append(word[len(cut):])
            if i:
                cut[0] = " " + cut[0]
            pieces[lo:lo + len(cut)] = cut
        return pieces

    def build(self, request: Request, path: WfstPath, tokens: np.ndarray, frames: np.ndarray,
              probs: np.ndarray, num_frames: int) -> RequestOutput:
        words = self.graph.word_text(path.words)
        ids = tokens.tolist()
        out = RequestOutput(request_id=request.request_id, text=" ".join(words), token_ids=ids,
                            finish_reason="stop", metadata=request.metadata)
        if request.decoding.word_timestamps:
            if self.clock is None or self.graph.spellings is None:
                raise ValueError("word timings need the frame clock and the graph's lexicon")
            starts, ends = emission_spans(frames, num_frames)
            fill_word_timings(out, None, ids, starts, ends, probs, self.clock,
                              pieces=self.pieces(tokens, words))
        else:
            out.confidence = mean_posterior(probs)
        return out


class CtcWfstDecodeStrategy(FrameSyncStrategy):
    """One ``decode_offline`` call per micro-batch; the graph is loaded at construction."""

    name = "ctc_wfst"
    consumes = "log_probs"
    capability = "ctc"
    options_cls = CtcWfstOptions
    selective_options: ClassVar[tuple[str, ...]] = ("hotwords", "hotwords_score")
    streaming_session = CtcWfstStreamingSession

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or CtcWfstOptions(), **kwargs)
        self.blank = int(model.config.blank_id)
        self.graph = load_graph(resolve_graph(self.options.graph, self._bundle()))
        self._check_units(model)
        self.search_options = self.options.search(self.blank)
        self.hotwords = HotwordCache(self.graph, self.options.hotwords_score)

    def _bundle(self) -> Path | None:
        source = getattr(self.engine_config, "model", "") or ""
        if not source:
            return None
        from oasr.models.loader import ensure_bundle

        return ensure_bundle(source).path

    def _check_units(self, model: Any) -> None:
        info = self.graph.info
        vocab = getattr(model.config, "vocab_size", None)
        top = self.graph.graph.max_token
        if vocab is not None and top >= int(vocab):
            raise GraphError(f"graph {self.graph.path} consumes unit {top}, past the model's "
                             f"{vocab} units: it was built for another model")
        if info.blank is not None and info.blank != self.blank:
            raise GraphError(f"graph {self.graph.path} was built with blank {info.blank}, the "
                             f"model's blank is {self.blank}")

    def n_best_limit(self) -> tuple[int, str]:
        return 1, "ctc_wfst keeps one token per graph state (no lattice): it returns one best"

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        if self.graph.spellings is None:
            return ()
        return super().word_timing_modes

    def validate_options(self, decoding: Any) -> None:
        if decoding.word_timestamps and self.graph.spellings is None:
            raise ValueError(f"decode family 'ctc_wfst' cannot time words with graph "
                             f"{self.graph.path}: it has no lexicon beside it "
                             f"({self.graph.path.stem}.lexicon.int, written by 'oasr graph "
                             "build')")
        super().validate_options(decoding)
        if decoding.hotwords_score is not None and not decoding.hotwords:
            raise ValueError("hotwords_score boosts a request's hotwords; it sets none")
        self.hotwords.get(decoding)  # builds (and checks) the phrases

    def search(self, log_probs: torch.Tensor, lens: torch.Tensor | None,
               boosting: Sequence[Any] | None = None) -> tuple[np.ndarray, list[WfstPath]]:
        """log_probs (B, T', V), lens (B,) -> the rows' frame counts and best paths;
        ``boosting``: per row its hot words' automaton or ``None``."""
        B, T = log_probs.shape[:2]
        n = (np.full(B, T, dtype=np.int64) if lens is None
             else lens.detach().to("cpu", torch.int64).numpy())
        boosting = list(boosting) if boosting and any(b is not None for b in boosting) else None
        device = _WFST_SEARCH.select(log_probs, self.graph, self.search_options, boosting)
        if device is not None:
            return n, device(log_probs, lens, self.graph, self.search_options)
        lp, n = host_log_probs(log_probs, lens)
        threads = max(1, min(B, torch.get_num_threads()))
        return n, decode_rows(self.graph.graph.native(), lp, n, self.search_options, boosting,
                              threads)

    def decode_offline(self, log_probs: torch.Tensor, lens: torch.Tensor | None,
                       requests: list[Request]) -> list[RequestOutput]:
        """log_probs (B, T', V), lens (B,) encoder frames -> one output per request."""
        boosting = [self.hotwords.get(r.decoding) for r in requests]
        n, paths = self.search(log_probs, lens, boosting)
        outputs = WfstOutputs(self.graph, self.blank, self.clock)
        rows = [outputs.tokens(p) for p in paths]
        probs = token_posteriors(log_probs, n, rows)
        return [outputs.build(r, p, tok, fr, pr, int(n[b]))
                for b, (r, p, (tok, fr), pr) in enumerate(zip(requests, paths, rows, probs))]
