"""A recording's windows released in order (oasr.transcribe.recording): with word timings and a
coverage detector a window waits for the next one, so its words are snapped knowing the speech
and the word after it."""

from __future__ import annotations

from oasr.engine.request import DecodingOptions
from oasr.io import ManifestRow
from oasr.transcribe.coverage import CoverageCheck, EnergySpeech
from oasr.transcribe.recording import RowState, WindowGroup, release_groups
from oasr.transcribe.repair import RowCoverage
from oasr.transcribe.segments import Piece


def _piece(start: float, end: float, words: list[tuple[str, float, float]]) -> Piece:
    timed = [{"word": f" {w}", "start": a, "end": b, "confidence": 0.9} for w, a, b in words]
    return Piece(start, end, "".join(w["word"] for w in timed), timed)


def _state(coverage: RowCoverage | None) -> RowState:
    return RowState(ManifestRow("r", None), None, DecodingOptions(word_timestamps=True),
                    long=True, coverage=coverage)


def test_a_sentence_opener_left_before_a_window_s_pause_moves_into_the_next_window():
    coverage = RowCoverage(CoverageCheck(EnergySpeech()), 16000, window_s=30.0)
    coverage.settle([(1.0, 10.1), (11.9, 14.0)], 0.0, 30.0)
    state = _state(coverage)
    settled = []
    state.groups.append(WindowGroup(0, _piece(0.0, 10.5, [("lovely.", 9.0, 9.4),
                                                          ("But", 9.4, 10.0)])))
    release_groups(state, settled.append)
    assert not settled  # held until the next window settles
    state.groups.append(WindowGroup(1, _piece(10.5, 14.0, [("I", 11.9, 12.3),
                                                           ("am", 12.3, 12.6)])))
    release_groups(state, settled.append)
    assert [w["word"].strip() for w in settled[0].words] == ["lovely.", "But"]
    but = settled[0].words[1]
    assert but["start"] == 11.9  # moved across the 1.8-s pause, to where the speech resumes
    state.read_all = True
    release_groups(state, settled.append)
    assert len(settled) == 2 and not state.groups
    words = state.words
    assert [w["word"].strip() for w in words] == ["lovely.", "But", "I", "am"]
    for a, b in zip(words, words[1:]):
        assert a["start"] < a["end"] <= b["start"] < b["end"]
    segs = state.segments
    assert all(a["end"] <= b["start"] for a, b in zip(segs, segs[1:]))


def test_without_a_detector_a_window_is_released_as_soon_as_it_settles():
    state = _state(None)
    settled = []
    state.groups.append(WindowGroup(0, _piece(0.0, 10.5, [("lovely.", 9.0, 9.4),
                                                          ("But", 9.4, 10.0)])))
    release_groups(state, settled.append)
    assert len(settled) == 1 and settled[0].words[1]["start"] == 9.4
