"""ARPA reading/writing and the interpolated Kneser-Ney estimate, checked against the model's
definition: every history's distribution sums to one, seen n-grams are discounted by the
order's D = n1 / (n1 + 2 n2), and the file reads back to the same probabilities."""

from __future__ import annotations

import itertools
import math

import pytest

from oasr.graphs.arpa import ArpaError, NgramModel, estimate, read_arpa, write_arpa
from tests.graphs.helpers import sentences

TEXT = [s.split() for s in ("a b c a b", "b c a", "a b b c", "c c a b", "a")]


def vocabulary(model: NgramModel) -> list[str]:
    return [*model.vocabulary, "</s>"]


@pytest.mark.parametrize("order", [1, 2, 3])
def test_every_history_is_a_distribution(order):
    model = estimate(TEXT, order)
    vocab = vocabulary(model)
    histories = [()] + [h for n in range(1, order) for h in itertools.product(
        ["<s>", *model.vocabulary], repeat=n)]
    for h in histories:
        total = sum(10 ** model.log10_prob(h, w) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-6), h


def test_kneser_ney_by_hand():
    """Bigram KN on 'a b c a b' / 'b c a' / ...: p(b | a) = (c(ab) - D) / c(a.) + gamma(a)
    p_cont(b), the unigram level interpolated with the uniform distribution."""
    model = estimate(TEXT, 2)
    bigrams: dict[tuple[str, str], int] = {}
    for s in TEXT:
        w = ["<s>", *s, "</s>"]
        for x, y in zip(w, w[1:]):
            bigrams[(x, y)] = bigrams.get((x, y), 0) + 1
    n1 = sum(1 for c in bigrams.values() if c == 1)
    n2 = sum(1 for c in bigrams.values() if c == 2)
    d2 = n1 / (n1 + 2 * n2)
    cont = {w: len({x for (x, y) in bigrams if y == w}) for w in ["a", "b", "c", "</s>"]}
    c1 = sum(1 for c in cont.values() if c == 1)
    c2 = sum(1 for c in cont.values() if c == 2)
    d1 = c1 / (c1 + 2 * c2) if c1 and c2 else 0.5
    total = sum(cont.values())
    p_uni = {w: max(c - d1, 0) / total + d1 * len(cont) / total / 4 for w, c in cont.items()}
    after_a = {y: c for (x, y), c in bigrams.items() if x == "a"}
    ca = sum(after_a.values())
    expect = (after_a["b"] - d2) / ca + d2 * len(after_a) / ca * p_uni["b"]
    assert 10 ** model.log10_prob(["a"], "b") == pytest.approx(expect, rel=1e-9)
    assert 10 ** model.log10_prob([], "c") == pytest.approx(p_uni["c"], rel=1e-6)


def test_write_then_read_gives_the_same_model(tmp_path):
    model = estimate(sentences(30), 3)
    write_arpa(model, tmp_path / "lm.arpa")
    back = read_arpa(tmp_path / "lm.arpa")
    assert back.order == 3 and back.vocabulary == model.vocabulary
    for n in range(3):
        assert back.grams[n].keys() == model.grams[n].keys()
    for h, w in [((), "the"), (("of",), "the"), (("<s>", "he"), "was"), (("zzz",), "the")]:
        assert back.log10_prob(h, w) == pytest.approx(model.log10_prob(h, w), abs=1e-6)


def test_bad_files_name_the_line(tmp_path):
    p = tmp_path / "bad.arpa"
    p.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0 a\n-x b\n\\end\\\n")
    with pytest.raises(ArpaError, match=r"bad.arpa:6: not a number"):
        read_arpa(p)
    p.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0 a\n-1.0 b\n\\end\\\n")
    with pytest.raises(ArpaError, match="announces 3 1-grams, the file has 2"):
        read_arpa(p)
    p.write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0 a\n")
    with pytest.raises(ArpaError, match="no \\\\end"):
        read_arpa(p)
    with pytest.raises(ValueError, match="no text"):
        estimate([], 3)


def test_backoff_reads_lower_orders():
    model = NgramModel([{("a",): (-0.5, -0.2), ("b",): (-0.3, 0.0), ("</s>",): (-1.0, 0.0)},
                        {("a", "b"): (-0.1, 0.0)}])
    assert model.log10_prob(["a"], "b") == -0.1
    assert model.log10_prob(["a"], "a") == pytest.approx(-0.2 - 0.5)
    assert model.log10_prob(["b"], "a") == -0.5
    assert math.isclose(model.log10_prob([], "zzz"), -99.0)
