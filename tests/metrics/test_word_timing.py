"""Boundary errors: each utterance's first and last reference word found among the hypothesis
words (substitutions count), their times against the utterance's, and a miss when none matched."""

from __future__ import annotations

import pytest

from oasr.metrics.word_timing import boundary_errors


def test_first_and_last_matched_words_and_their_errors():
    segments = [{"id": "a", "start": 0.0, "end": 1.0, "text": "hello big world"},
                {"id": "b", "start": 2.0, "end": 3.0, "text": "good night"}]
    words = [{"word": "Hello", "start": 0.1, "end": 0.3},
             {"word": "big", "start": 0.3, "end": 0.5},
             {"word": "word.", "start": 0.5, "end": 0.9},  # substitutes "world"
             {"word": "Good", "start": 2.05, "end": 2.4},
             {"word": "light.", "start": 2.4, "end": 3.5}]
    report = boundary_errors(words, segments)
    a, b = report.utterances
    assert (a.first_word, a.last_word, b.first_word, b.last_word) == (
        "Hello", "word.", "Good", "light.")
    assert a.start_error == pytest.approx(0.1) and a.end_error == pytest.approx(0.1)
    assert b.start_error == pytest.approx(0.05) and b.end_error == pytest.approx(0.5)
    assert report.within(0.2) == 0.5 and report.fraction("start", 0.2) == 1.0
    assert report.missed == 0


def test_an_utterance_with_no_matched_word_is_a_miss():
    segments = [{"id": "a", "start": 0.0, "end": 1.0, "text": "red green"},
                {"id": "b", "start": 2.0, "end": 3.0, "text": "blue sky above"}]
    words = [{"word": "red", "start": 0.0, "end": 0.5}, {"word": "green", "start": 0.5, "end": 1.0}]
    report = boundary_errors(words, segments)
    assert report.missed == 1
    assert report.utterances[1].first_word is None
    assert report.utterances[1].start_error == float("inf")
    assert report.within(0.3) == 0.5
