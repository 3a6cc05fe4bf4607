"""Local agreement: the common prefix of consecutive hypotheses commits, once."""

from __future__ import annotations

from oasr.streaming.agreement import HypothesisBuffer, Word


def _w(*items):
    return [Word(t, a, b) for t, a, b in items]


def test_commits_the_agreed_prefix_only() -> None:
    h = HypothesisBuffer()
    assert h.agree(_w(("Hello", 0.0, 0.4), ("wor", 0.5, 0.8))) == []
    got = h.agree(_w(("hello,", 0.0, 0.4), ("world", 0.5, 0.9), ("and", 1.0, 1.1)))
    assert [w.text for w in got] == ["hello,"]  # case and punctuation do not count
    assert [w.text for w in h.partial] == ["world", "and"]
    got = h.agree(_w(("Hello", 0.0, 0.4), ("world", 0.5, 0.9), ("and", 1.0, 1.2),
                     ("then", 1.3, 1.5)))
    assert [w.text for w in got] == ["world", "and"]  # the committed word is not re-committed
    assert h.committed_end == 1.2


def test_repeated_ngram_at_the_buffer_edge_is_dropped() -> None:
    h = HypothesisBuffer()
    h.agree(_w(("a", 0.0, 0.2), ("b", 0.3, 0.5)))
    h.agree(_w(("a", 0.0, 0.2), ("b", 0.3, 0.5)))
    h.drop_before(0.0)
    # After a trim the model re-reads "b" with a slightly later start: not committed twice.
    assert h.insert(_w(("b", 0.45, 0.6), ("c", 0.7, 0.9))) == _w(("c", 0.7, 0.9))


def test_commit_all_and_commit_previous() -> None:
    h = HypothesisBuffer()
    h.agree(_w(("x", 0.0, 0.2), ("y", 0.3, 0.4)))
    assert [w.text for w in h.commit_previous()] == ["x", "y"] and h.partial == []
    assert [w.text for w in h.commit_all(_w(("y", 0.3, 0.4), ("z", 0.5, 0.6)))] == ["z"]
