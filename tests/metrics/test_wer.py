"""Corpus WER/CER scoring: hand-computed cases, edge cases, normalizers, and jiwer as the oracle."""

from __future__ import annotations

import jiwer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oasr.metrics.wer import (
    EmptyReferenceError,
    UtteranceScore,
    get_normalizer,
    normalizer_names,
    score,
)
from oasr.registry import UnknownNameError


def test_substitution_and_deletion_hand_computed():
    r = score({"u": "the cat sat on the mat"}, {"u": "the cat sit on mat"}, normalizer="none")
    assert (r.substitutions, r.deletions, r.insertions, r.hits) == (1, 1, 0, 4)
    assert r.ref_words == 6
    assert r.wer == pytest.approx(2 / 6)
    assert r.utterances == 1
    assert r.per_utterance == [
        UtteranceScore("u", "the cat sat on the mat", "the cat sit on mat", 2, 6)
    ]


def test_insertions_hand_computed():
    r = score({"u": "a b"}, {"u": "a x b y"}, normalizer="none")
    assert (r.substitutions, r.deletions, r.insertions) == (0, 0, 2)
    assert r.wer == pytest.approx(1.0)
    r = score({"u": "a b"}, {"u": "a x b y z w"}, normalizer="none")
    assert r.wer == pytest.approx(2.0)  # WER is not capped at 100%


def test_corpus_rate_is_total_errors_over_total_words_not_a_mean():
    refs = {"1": "a b c d", "2": "e"}
    hyps = {"1": "a b c d", "2": "f g"}
    r = score(refs, hyps, normalizer="none")
    # utterance 2: one substitution and one insertion; the mean of rates would be 1.0
    assert (r.substitutions, r.deletions, r.insertions) == (1, 0, 1)
    assert r.wer == pytest.approx(2 / 5)
    assert [u.errors for u in r.per_utterance] == [0, 2]


def test_character_error_rate_hand_computed():
    r = score({"u": "abc"}, {"u": "abd"}, normalizer="none")
    assert r.cer == pytest.approx(1 / 3)
    assert (r.char_substitutions, r.ref_chars) == (1, 3)
    # the space between words is a character
    r = score({"u": "ab cd"}, {"u": "ab"}, normalizer="none")
    assert (r.char_deletions, r.ref_chars) == (3, 5)
    assert r.cer == pytest.approx(3 / 5)
    assert r.wer == pytest.approx(1 / 2)


def test_missing_hypothesis_deletes_the_whole_reference():
    refs = {"1": "a b", "2": "c d e"}
    r = score(refs, {"1": "a b"}, normalizer="none")
    assert r.missing_ids == ["2"]
    assert (r.substitutions, r.deletions, r.insertions) == (0, 3, 0)
    assert r.wer == pytest.approx(3 / 5)
    assert r.per_utterance[1] == UtteranceScore("2", "c d e", "", 3, 3)


def test_extra_hypothesis_ids_are_ignored_and_listed():
    r = score({"1": "a b"}, {"1": "a b", "9": "x y z", "8": "q"}, normalizer="none")
    assert r.extra_ids == ["9", "8"]
    assert r.wer == 0.0
    assert r.utterances == 1


def test_reference_empty_after_normalization_counts_hypothesis_words_as_insertions():
    refs = {"1": "a b", "2": "[noise]"}  # the whisper normalizer drops bracketed tags
    hyps = {"1": "a b", "2": "hello there"}
    r = score(refs, hyps, normalizer="whisper")
    assert r.per_utterance[1] == UtteranceScore("2", "", "hello there", 2, 0)
    assert (r.substitutions, r.deletions, r.insertions) == (0, 0, 2)
    assert r.ref_words == 2
    assert r.wer == pytest.approx(2 / 2)
    assert r.char_insertions == len("hello there")
    assert r.cer == pytest.approx(len("hello there") / len("a b"))
    # whitespace-only reference with normalizer none behaves the same
    r = score({"1": "a b", "2": "   "}, {"1": "a b", "2": "x"}, normalizer="none")
    assert r.insertions == 1 and r.wer == pytest.approx(0.5)
    # an empty reference with an empty hypothesis is no error
    r = score({"1": "a b", "2": ""}, {"1": "a b", "2": ""}, normalizer="none")
    assert r.wer == 0.0 and r.per_utterance[1].errors == 0


def test_no_reference_words_refuses():
    with pytest.raises(EmptyReferenceError, match="no references"):
        score({}, {"1": "a"})
    with pytest.raises(EmptyReferenceError, match="empty after"):
        score({"1": "", "2": "  "}, {"1": "a", "2": ""}, normalizer="none")


def test_normalizers():
    assert set(normalizer_names()) >= {"whisper", "basic", "none"}
    whisper, basic, none = (get_normalizer(n) for n in ("whisper", "basic", "none"))
    assert whisper("Hello, World!") == "hello world"
    assert whisper("it's the colour") == "it is the color"  # contractions, US spelling
    assert basic("Hello, World!") == "hello world"
    assert basic("the colour") == "the colour"
    assert none("  Hello,   World! ") == "Hello, World!"  # only whitespace is canonicalized
    with pytest.raises(UnknownNameError, match="basic, none, whisper"):
        get_normalizer("shouty")


def test_normalizer_changes_the_score():
    refs, hyps = {"u": "Hello, world!"}, {"u": "hello world"}
    assert score(refs, hyps, normalizer="whisper").wer == 0.0
    assert score(refs, hyps, normalizer="basic").wer == 0.0
    r = score(refs, hyps, normalizer="none")
    assert r.substitutions == 2 and r.wer == pytest.approx(1.0)
    assert r.normalizer == "none"


def test_worst_ranks_by_rate_then_errors_and_skips_perfect_utterances():
    refs = {"a": "x y z w", "b": "x y", "c": "x", "d": "x y"}
    hyps = {"a": "x q z", "b": "q q", "c": "x", "d": "x q"}
    r = score(refs, hyps, normalizer="none")
    # a: 1 sub + 1 del = 2/4; b: 2/2; c: 0; d: 1/2
    assert [u.id for u in r.worst(10)] == ["b", "a", "d"]
    assert [u.id for u in r.worst(1)] == ["b"]
    assert r.worst(0) == []


def test_to_dict_shape():
    r = score({"1": "a b", "2": "c"}, {"1": "a"}, normalizer="none")
    d = r.to_dict(worst=5)
    for k in ("wer", "cer", "substitutions", "deletions", "insertions", "ref_words",
              "utterances", "missing_ids", "normalizer"):
        assert k in d
    assert d["missing_ids"] == ["2"]
    assert d["deletions"] == 2 and d["ref_words"] == 3 and d["utterances"] == 2
    assert [w["id"] for w in d["worst"]] == ["2", "1"]
    assert "worst" not in r.to_dict()


# --- jiwer as the oracle -----------------------------------------------------------------------

_WORDS = st.sampled_from(["a", "b", "c", "dd", "e"])
_SENT = st.lists(_WORDS, min_size=0, max_size=7)


@st.composite
def _corpus(draw):
    n = draw(st.integers(min_value=1, max_value=6))
    refs = [draw(st.lists(_WORDS, min_size=1, max_size=7)) for _ in range(n)]
    hyps = [draw(_SENT) for _ in range(n)]
    sep = draw(st.sampled_from([" ", "  "]))
    return [sep.join(r) for r in refs], [sep.join(h) for h in hyps]


@settings(max_examples=60, deadline=None)
@given(_corpus())
def test_corpus_scores_match_jiwer(corpus):
    refs, hyps = corpus
    ids = [f"u{k}" for k in range(len(refs))]
    r = score(dict(zip(ids, refs, strict=True)), dict(zip(ids, hyps, strict=True)),
              normalizer="none")
    assert r.wer == pytest.approx(jiwer.wer(refs, hyps))
    out = jiwer.process_words(refs, hyps)
    assert (r.substitutions, r.deletions, r.insertions, r.hits) == (
        out.substitutions, out.deletions, out.insertions, out.hits)
    single = [" ".join(s.split()) for s in refs], [" ".join(s.split()) for s in hyps]
    assert r.cer == pytest.approx(jiwer.cer(*single))
    # per-utterance errors are each utterance's own edit distance, and add up to the corpus
    for u, ref, hyp in zip(r.per_utterance, refs, hyps, strict=True):
        one = jiwer.process_words(ref, hyp)
        assert u.errors == one.substitutions + one.deletions + one.insertions
        assert u.ref_words == len(ref.split())
    assert sum(u.errors for u in r.per_utterance) == r.errors
