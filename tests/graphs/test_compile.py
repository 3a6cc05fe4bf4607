"""TLG building: G scores a word sequence exactly as the ARPA model does (backoff arcs
included), L o G keeps every word's spelling, and TLG accepts a sequence's CTC frames with the
LM cost of its words."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oasr.graphs.arpa import NgramModel, estimate
from oasr.graphs.compile import build_tlg, grammar_fst, word_table
from tests.graphs.helpers import UNITS, char_lexicon, sentences, spell

kaldifst = pytest.importorskip("kaldifst")


def shortest_cost(fst, labels, free=None):
    """The cheapest path of ``fst`` reading ``labels`` (label ``free`` allowed anywhere: G's
    backoff symbol), by composing an acceptor of them."""
    n = len(labels)
    lines = [f"{i} {i + 1} {lab} {lab}" for i, lab in enumerate(labels)]
    if free is not None:
        lines += [f"{i} {i} {free} {free}" for i in range(n + 1)]
    acc = kaldifst.compile("\n".join([*lines, str(n)]) + "\n")
    kaldifst.arcsort(fst, sort_type="ilabel")
    best = kaldifst.shortest_path(kaldifst.compose(acc, fst))
    ok, _, _, weight = kaldifst.get_linear_symbol_sequence(best)
    assert ok
    return weight.value


def lm_cost(model: NgramModel, words: list[str]) -> float:
    hist = ["<s>"]
    total = 0.0
    for w in [*words, "</s>"]:
        total += model.log10_prob(hist, w)
        hist.append(w)
    return -total * math.log(10)


@pytest.fixture(scope="module")
def model():
    return estimate(sentences(15), 3)


def test_grammar_costs_are_the_language_model(model):
    """The cheapest G path of a word sequence costs what the model gives it: the explicit
    n-gram where there is one (a consistent model's backoff path costs more), else the backoff
    weights and the lower order."""
    words = word_table(model.vocabulary)
    g, dropped = grammar_fst(model, words)
    assert dropped == 0
    rng = np.random.default_rng(0)
    sents = sentences(15)
    cases = [sents[0][:5], sents[4][3:9], list(rng.choice(model.vocabulary, 6))]
    for ws in cases:
        got = shortest_cost(g, [words.ids[w] for w in ws], free=words.ids["#0"])
        assert got == pytest.approx(lm_cost(model, ws), rel=1e-5)


def test_tlg_accepts_ctc_frames_of_a_sentence(model):
    parts = build_tlg(len(UNITS), 0, char_lexicon(model.vocabulary), model)
    assert parts.report["lexicon_words"] == len(model.vocabulary)
    words = sentences(15)[2][:4]
    frames = []
    for w in words:
        prev = None
        for u in spell(w):
            if u == prev:
                frames.append(0)  # CTC needs a blank between repeats
            frames += [u, u]
            prev = u
        frames.append(0)
    labels = [f + 1 for f in frames]
    tlg = kaldifst.StdVectorFst(parts.fst)
    acc = kaldifst.make_linear_acceptor(labels)
    kaldifst.arcsort(tlg, sort_type="ilabel")
    out = kaldifst.shortest_path(kaldifst.compose(acc, tlg))
    ok, _, osyms, weight = kaldifst.get_linear_symbol_sequence(out)
    assert ok
    assert [parts.words.names[o] for o in osyms] == words
    # the path costs what the LM gives the words (T and L are free; determinization in the log
    # semiring moves weights along a path but keeps its total, up to its weight quantization:
    # delta 1/1024 per arc)
    assert weight.value == pytest.approx(lm_cost(model, words), abs=5e-3)


def test_lexicon_disambiguation():
    from oasr.graphs.lexicon import Lexicon

    lex = Lexicon([("ab", (1, 2)), ("a", (1,)), ("ba", (2, 1)), ("ab2", (1, 2)), ("b", (2,))])
    entries, top = lex.disambiguated()
    ks = {w: k for w, _, k in entries}
    assert ks == {"ab": 1, "a": 1, "ba": 0, "ab2": 2, "b": 1}
    assert top == 2


def test_units_the_model_lacks_are_refused(model):
    from oasr.graphs.lexicon import Lexicon

    lex = Lexicon([(w, (99,)) for w in model.vocabulary])
    with pytest.raises(ValueError, match="units \\[99\\]"):
        build_tlg(len(UNITS), 0, lex, model)
    with pytest.raises(ValueError, match="no word of the language model"):
        build_tlg(len(UNITS), 0, Lexicon([("zzzz", (1,))]), model)
