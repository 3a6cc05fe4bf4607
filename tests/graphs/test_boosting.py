"""Hot words: the boosting automaton's totals against a brute-force count of phrase
occurrences, and the search with the automaton walked beside the graph (on the fly) against
kaldi-decoder on the graph statically composed with the automaton written out as an FST."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from oasr.graphs.boosting import HotwordGraph
from oasr.graphs.openfst import read_fst_arrays
from oasr.graphs.search import SearchOptions, decode_rows
from oasr.graphs.store import load_graph
from tests.graphs.helpers import build_graph, kaldi_best, random_log_probs, small_lm

PHRASES = [[1, 2], [1, 2, 3], [2, 3], [4], [3, 1, 3]]
BONUS = {1: 1.0, 2: 0.5, 3: 2.0, 4: 1.5}


def completed(words, phrases, bonus):
    """The bonus of every phrase occurrence in ``words`` (overlaps counted)."""
    total = 0.0
    for p in phrases:
        for i in range(len(words) - len(p) + 1):
            if list(words[i:i + len(p)]) == p:
                total += sum(bonus[w] for w in p)
    return total


def test_a_path_ends_ahead_by_exactly_its_phrases():
    g = HotwordGraph(PHRASES, BONUS)
    for n in range(7):
        for words in itertools.product([1, 2, 3, 4, 5], repeat=n):
            node, total = 0, 0.0
            for w in words:
                node, gain = g.step(node, w)
                total += gain
            total -= g.pending(node)  # what the final cost takes back
            assert total == pytest.approx(completed(words, PHRASES, BONUS)), words


def test_tables_are_the_steps():
    g = HotwordGraph(PHRASES, BONUS)
    t = g.tables()
    for node in range(len(g.nodes)):
        lo, hi = t["offsets"][node], t["offsets"][node + 1]
        assert t["labels"][lo:hi].tolist() == sorted(BONUS)
        for i in range(lo, hi):
            to, gain = g.step(node, int(t["labels"][i]))
            assert (t["next"][i], t["cost"][i]) == (to, pytest.approx(-gain))
        assert g.step(node, 99) == (0, pytest.approx(-t["default_cost"][node]))
        assert t["final_cost"][node] == pytest.approx(g.pending(node))


def test_an_empty_phrase_is_refused():
    with pytest.raises(ValueError, match="no words"):
        HotwordGraph([[]], {})


def boosting_fst(g: HotwordGraph, num_words: int):
    """The automaton as an FST over every word label 1..num_words (a tiny vocabulary)."""
    import kaldifst

    lines = []
    for node in range(len(g.nodes)):
        for w in range(1, num_words + 1):
            to, gain = g.step(node, w)
            lines.append(f"{node} {to} {w} {w} {-gain:.9g}")
    lines += [f"{node} {g.pending(node):.9g}" for node in range(len(g.nodes))]
    fst = kaldifst.StdVectorFst(kaldifst.compile("\n".join(lines) + "\n"))
    kaldifst.arcsort(fst, sort_type="ilabel")
    return fst


@pytest.mark.parametrize("score", [2.0, 6.0])
def test_on_the_fly_boosting_equals_static_composition(tmp_path, score):
    kaldifst = pytest.importorskip("kaldifst")
    pytest.importorskip("kaldi_decoder")
    path = build_graph(tmp_path, "tg", small_lm(limit=6))
    graph = load_graph(path)
    words = ["the", "of the", "and", "was"]
    ids = [[graph.words.ids[w] for w in p.split()] for p in words]
    spellings = graph.spellings
    bonus = {i: score * len(spellings[graph.words.names[i]][0]) for p in ids for i in p}
    hot = HotwordGraph(ids, bonus)
    # the composed graph TLG o C, as a const FST for kaldi-decoder (TLG through our reader,
    # written out as text so kaldifst gets a vector FST to compose)
    arrays = read_fst_arrays(path)
    lines = [f"{s} {n} {i} {o} {w!r}" for s, i, o, w, n in zip(
        arrays.src.tolist(), arrays.ilabel.tolist(), arrays.olabel.tolist(),
        arrays.weight.tolist(), arrays.next.tolist())]
    lines.sort(key=lambda x: int(x.split()[0]) != arrays.start)
    lines += [f"{s} {f!r}" for s, f in enumerate(arrays.final.tolist()) if f != float("inf")]
    tlg = kaldifst.StdVectorFst(kaldifst.compile("\n".join(lines) + "\n"))
    kaldifst.arcsort(tlg, sort_type="olabel")
    composed = kaldifst.compose(tlg, boosting_fst(hot, max(graph.words.names)))
    composed_path = tmp_path / "composed.fst"
    kaldifst.StdConstFst(composed).write(str(composed_path))
    lp = random_log_probs(seed=int(score), batch=4, frames=60, sharpness=2.0)
    lens = np.array([60, 55, 40, 20])
    opts = SearchOptions(beam=12.0, max_active=2**31 - 1, min_active=0)
    ours = decode_rows(graph.graph.native(), lp, lens, opts, [hot.native()] * 4)
    plain = decode_rows(graph.graph.native(), lp, lens, opts)
    changed = 0
    for b in range(4):
        ref = kaldi_best(composed_path, lp[b, :lens[b]], beam=12.0, max_active=2**31 - 1,
                         min_active=0)
        assert ours[b].labels.tolist() == ref.labels
        assert ours[b].words.tolist() == ref.words
        assert ours[b].cost == pytest.approx(ref.cost, rel=1e-5, abs=1e-3)
        changed += ours[b].words.tolist() != plain[b].words.tolist()
    if score == 6.0:
        assert changed  # the boost matters at this score
