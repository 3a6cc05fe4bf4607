"""Shared by the graph and ctc_wfst tests: a character unit set, a language model from the
shared LibriSpeech transcripts, graphs built from them, random CTC posteriors, and the oracle
(kaldi-decoder's FasterDecoder, Kaldi's CPU decoder) on the same graph and posteriors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oasr.graphs.arpa import NgramModel, estimate
from oasr.graphs.compile import build_tlg
from oasr.graphs.lexicon import Lexicon
from oasr.graphs.store import GraphInfo, save_graph
from tests.helpers.data import SHARED_DATA

TRANSCRIPTS = SHARED_DATA / "librispeech-test-other-70" / "transcripts.tsv"
UNITS = ["<blank>", *"abcdefghijklmnopqrstuvwxyz'"]
UNIT_IDS = {u: i for i, u in enumerate(UNITS)}


def sentences(limit: int | None = None) -> list[list[str]]:
    """The shared transcripts, lower case, one word list per utterance."""
    rows = TRANSCRIPTS.read_text(encoding="utf-8").splitlines()[1:]
    return [r.split("\t")[2].split() for r in rows[:limit]]


def spell(word: str) -> tuple[int, ...]:
    return tuple(UNIT_IDS[c] for c in word)


def char_lexicon(words: list[str]) -> Lexicon:
    return Lexicon([(w, spell(w)) for w in words])


def build_graph(folder: Path, name: str, lm: NgramModel) -> Path:
    """A TLG over ``UNITS`` for ``lm``, its words spelt letter by letter, saved in ``folder``."""
    parts = build_tlg(len(UNITS), 0, char_lexicon(lm.vocabulary), lm)
    info = GraphInfo(kind="TLG", token_rule="entered", num_units=len(UNITS), blank=0,
                     build=parts.report)
    return save_graph(folder, name, parts.fst, parts.words, info, parts.lexicon.entries)


def small_lm(limit: int = 12, order: int = 3) -> NgramModel:
    return estimate(sentences(limit), order)


def random_log_probs(seed: int, batch: int, frames: int, vocab: int = len(UNITS),
                     sharpness: float = 3.0) -> np.ndarray:
    """(B, T, V) float32 log-softmax of Gaussian logits."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, frames, vocab)) * sharpness
    x -= np.log(np.exp(x).sum(-1, keepdims=True))
    return x.astype(np.float32)


@dataclass
class KaldiPath:
    labels: list[int]  # per frame: the emitting arc's token (input label - 1)
    words: list[int]
    cost: float
    reached_final: bool


def kaldi_best(fst_path: Path, log_probs: np.ndarray, *, beam: float, max_active: int,
               min_active: int, beam_delta: float = 0.5) -> KaldiPath:
    """kaldi-decoder's FasterDecoder over ``log_probs`` (T, V) on the graph at ``fst_path``."""
    import kaldi_decoder
    import kaldifst

    fst = kaldifst.StdConstFst.read(str(fst_path))
    opts = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=max_active,
                                              min_active=min_active, beam_delta=beam_delta)
    decoder = kaldi_decoder.FasterDecoder(fst, opts)
    decoder.decode(kaldi_decoder.DecodableCtc(np.ascontiguousarray(log_probs, np.float32)))
    reached = decoder.reached_final()
    ok, lattice = decoder.get_best_path()
    assert ok, "kaldi-decoder kept no token"
    ok, isyms, osyms, weight = kaldifst.get_linear_symbol_sequence(lattice)
    assert ok
    cost = weight.value1 + weight.value2  # graph + acoustic
    return KaldiPath([i - 1 for i in isyms], list(osyms), cost, reached)


def random_corpus(seed: int, num_units: int, num_words: int, num_sentences: int,
                  max_spelling: int = 6) -> tuple[Lexicon, list[list[str]]]:
    """A random lexicon (``num_words`` words, each spelt with 1..max_spelling units of
    1..num_units-1; unit 0 is the blank) and Zipf-distributed sentences over it: the shape of
    a real BPE lexicon and LM, for speed and scale (not for recognition)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_spelling + 1, num_words)
    words = [f"w{i}" for i in range(num_words)]
    lexicon = Lexicon([(w, tuple(int(u) for u in rng.integers(1, num_units, n)))
                       for w, n in zip(words, lengths)])
    p = 1.0 / np.arange(1, num_words + 1)
    p /= p.sum()
    sents = [[words[i] for i in rng.choice(num_words, int(rng.integers(3, 20)), p=p)]
             for _ in range(num_sentences)]
    return lexicon, sents


def build_random_graph(folder: Path, name: str, *, seed: int, num_units: int, num_words: int,
                       num_sentences: int, order: int = 3) -> Path:
    lexicon, sents = random_corpus(seed, num_units, num_words, num_sentences)
    parts = build_tlg(num_units, 0, lexicon, estimate(sents, order))
    info = GraphInfo(kind="TLG", token_rule="entered", num_units=num_units, blank=0,
                     build=parts.report)
    return save_graph(folder, name, parts.fst, parts.words, info, parts.lexicon.entries)
