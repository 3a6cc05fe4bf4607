"""Coverage: detected speech against the words that cover it."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.transcribe.coverage import (
    CoverageRules,
    EnergySpeech,
    build_coverage_detector,
    coverage_figure,
    covered_seconds,
    lone_stretches,
    plain_word,
    uncovered,
)

RULES = CoverageRules(tolerance_s=0.3, min_gap_s=0.5, max_word_s=1.5)


def _w(start: float, end: float) -> dict:
    return {"word": "x", "start": start, "end": end, "confidence": 1.0}


def test_words_cover_speech_within_the_tolerance():
    speech = [(1.0, 3.0), (5.0, 6.0)]
    words = [_w(1.2, 1.6), _w(1.7, 2.5)]
    # 1.0-2.8 covered (0.3 s either side of the words); 2.8-3.0 (0.2 s) too short to count
    # as a stretch, 5-6 s has no word.
    assert uncovered(speech, words, RULES) == [(5.0, 6.0)]
    covered, total = covered_seconds(speech, words, RULES)
    assert total == pytest.approx(3.0) and covered == pytest.approx(1.8)
    assert coverage_figure(speech, words, RULES) == pytest.approx(0.6)
    assert coverage_figure([], words, RULES) == 1.0  # nothing detected, nothing left out


def test_a_stretched_word_does_not_hide_the_speech_after_it():
    # One word the aligner stretched over 10 s of speech covers its first 1.5 s (+ tolerance).
    speech = [(0.0, 10.0)]
    gaps = uncovered(speech, [_w(0.0, 10.0)], RULES)
    assert gaps == [(pytest.approx(1.8), 10.0)]


def test_energy_speech_finds_bursts_and_ignores_steady_noise():
    sr = 16000
    rng = np.random.default_rng(0)
    audio = 0.001 * rng.standard_normal(6 * sr)
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * np.arange(sr) / sr)
    audio[2 * sr:3 * sr] += 0.2 * envelope * rng.standard_normal(sr)
    spans = EnergySpeech()(audio.astype(np.float32), sr)
    assert len(spans) == 1 and spans[0][0] == pytest.approx(2.0, abs=0.05)
    assert spans[0][1] == pytest.approx(3.0, abs=0.05)
    noise = (0.1 * rng.standard_normal(6 * sr)).astype(np.float32)
    assert EnergySpeech()(noise, sr) == []


def test_the_coverage_detector_is_named_or_refused():
    assert build_coverage_detector("none") is None
    assert build_coverage_detector("energy").name == "energy"
    with pytest.raises(ValueError, match="coverage_vad 'loud'"):
        build_coverage_detector("loud")
    vad = object()
    assert build_coverage_detector("auto", vad, "fsmn").segmenter is vad


def _named(word: str, start: float, end: float) -> dict:
    return {"word": word, "start": start, "end": end, "confidence": 1.0}


def test_a_lone_short_word_claims_its_run_of_speech():
    speech = [(1.0, 3.0), (4.0, 4.8), (6.0, 8.0), (9.0, 11.0)]
    words = [_named(" the", 1.2, 2.8),  # alone in a 2-s run: claimed
             _named(" I", 4.1, 4.6),  # alone, but the run is under lone_run_s
             _named(" and", 6.1, 6.4), _named(" so", 6.6, 7.8),  # two words in the run
             _named(" lobsters", 9.1, 10.9)]  # alone, but long
    assert lone_stretches(speech, words, RULES) == [((1.0, 3.0), 0)]
    # What a neighbour's cover reaches into is not the lone word's stretch.
    near = [*words, _named(" we", 3.1, 3.4)]
    ((start, end), index), = lone_stretches(speech, near, RULES)
    assert (start, index) == (1.0, 0) and end == pytest.approx(2.8)
    assert lone_stretches(speech, words, CoverageRules(lone_letters=0)) == []
    assert plain_word(" These,") == "these" and plain_word("I'm") == "im"
