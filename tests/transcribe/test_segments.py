"""Segments from the words: phrases, strictly increasing, never overlapping."""

from __future__ import annotations

import pytest

from oasr.transcribe.segments import (
    MAX_SEGMENT_S,
    MIN_WORD_S,
    SEGMENT_PAUSE_S,
    Piece,
    assemble,
    floor_word_lengths,
)


def _words(spec):
    return [{"word": w, "start": a, "end": b, "confidence": 0.9} for w, a, b in spec]


def test_a_short_clip_is_cut_at_sentence_ends_and_pauses():
    words = _words([("Hello", 0.5, 0.9), ("there.", 0.95, 1.6), ("How", 1.8, 2.0),
                    ("are", 2.0, 2.2), ("you?", 2.2, 2.6), ("Fine", 2.6 + SEGMENT_PAUSE_S, 4.0),
                    ("thanks", 4.0, 4.5)])
    text = "Hello there. How are you? Fine thanks"
    got_text, segments, _ = assemble([Piece(0.0, 5.0, text, words)])
    assert got_text == text
    assert [(s["start"], s["end"], s["text"]) for s in segments] == [
        (0.5, 1.6, "Hello there."), (1.8, 2.6, "How are you?"), (3.6, 4.5, "Fine thanks")]


def test_whisper_segments_are_kept_and_the_times_come_from_the_words():
    # The model's segments overlap the next window's (26.08 -> 25.61 in a real run); the
    # words do not, so neither do the segments.
    a = Piece(0.0, 26.0, "One two. Three", _words([("One", 20.0, 20.4), ("two.", 20.4, 21.0),
                                                    ("Three", 24.0, 25.6)]),
              model_segments=[{"start": 20.0, "end": 21.2, "text": " One two."},
                              {"start": 22.0, "end": 26.08, "text": " Three"}])
    b = Piece(25.61, 40.0, "four five", _words([("four", 25.7, 26.0), ("five", 26.0, 26.4)]),
              model_segments=[{"start": 25.61, "end": 27.0, "text": " four five"}])
    text, segments, words = assemble([a, b])
    assert text == "One two. Three four five"
    assert [s["text"] for s in segments] == ["One two.", "Three", "four five"]
    assert [(s["start"], s["end"]) for s in segments] == [(20.0, 21.0), (24.0, 25.6),
                                                          (25.7, 26.4)]
    assert all(a_["end"] <= b_["start"] for a_, b_ in zip(segments, segments[1:]))


def test_unpunctuated_speech_is_cut_at_its_longest_pause():
    words = _words([(f"w{i}", 0.5 * i + (0.6 if i >= 20 else 0.0),
                     0.5 * i + 0.4 + (0.6 if i >= 20 else 0.0)) for i in range(40)])
    text = " ".join(w["word"] for w in words)
    _, segments, _ = assemble([Piece(0.0, 21.0, text, words)])
    assert len(segments) == 2 and segments[1]["text"].startswith("w20 ")
    assert all(s["end"] - s["start"] <= MAX_SEGMENT_S for s in segments)


def test_untimed_pieces_keep_one_segment_each_and_never_go_back():
    text, segments, words = assemble([Piece(0.0, 30.0, "first"), Piece(29.0, 40.0, "second")])
    assert words is None and text == "first second"
    assert [(s["start"], s["end"]) for s in segments] == [(0.0, 30.0), (30.0, 40.0)]
    _, one, _ = assemble([Piece(0.0, 4.9, "a short clip")])
    assert one == [{"start": 0.0, "end": 4.9, "text": "a short clip"}]


def test_a_repair_inside_a_window_splits_it_in_time_order():
    window = Piece(0.0, 30.0, "a b c", _words([("a", 1.0, 1.5), ("b", 2.0, 9.0),
                                              ("c", 12.0, 12.5)]))
    repair = Piece(3.0, 8.0, "x y", _words([("x", 3.2, 3.6), ("y", 4.0, 4.4)]), kind="repair")
    text, segments, words = assemble([window, repair])
    assert [w["word"] for w in words] == ["a", "b", "x", "y", "c"]
    assert text == "a b x y c"
    # The stretched word ends where the repair's first word starts.
    assert words[1]["end"] == 3.2
    assert all(w0["end"] <= w1["start"] for w0, w1 in zip(words, words[1:]))
    assert all(s0["end"] <= s1["start"] for s0, s1 in zip(segments, segments[1:]))


def test_a_repair_at_a_windows_first_word_comes_before_the_rest_of_the_window():
    # The window begins at the repaired stretch; its first word (the next sentence's, laid
    # by the aligner over speech the decode skipped) starts with the stretch.
    window = Piece(135.91, 165.0, "I really like", _words([("I", 135.91, 137.33),
                                                           ("really", 138.3, 139.2),
                                                           ("like", 139.2, 139.6)]))
    repair = Piece(135.91, 137.66, "lobsters and lobsters.",
                   _words([("lobsters", 135.91, 136.45), ("and", 136.45, 136.8),
                           ("lobsters.", 136.8, 137.4)]), kind="repair")
    for pieces in ([window, repair], [repair, window]):
        text, _, words = assemble(pieces)
        assert text == "lobsters and lobsters. I really like"
        assert [w["word"] for w in words] == ["lobsters", "and", "lobsters.", "I", "really",
                                              "like"]
        assert all(w0["end"] <= w1["start"] for w0, w1 in zip(words, words[1:]))


def test_a_repair_before_a_windows_first_word_still_splits_the_window_at_its_end():
    # No window word starts before the repair, but one starts inside it: the words after the
    # repair's end must not come before the repair's words.
    window = Piece(10.0, 40.0, "I really like", _words([("I", 10.3, 11.8),
                                                        ("really", 12.5, 13.0),
                                                        ("like", 13.0, 13.4)]))
    repair = Piece(10.0, 12.0, "x y", _words([("x", 10.5, 10.9), ("y", 11.0, 11.5)]),
                   kind="repair")
    text, _, words = assemble([window, repair])
    assert [w["word"] for w in words] == ["I", "x", "y", "really", "like"]
    assert text == "I x y really like"


def test_short_words_are_widened_into_the_pauses_only():
    words = _words([("a", 1.0, 1.03), ("b", 1.03, 1.05), ("c", 2.0, 2.5)])
    floored = floor_word_lengths(words)
    # Packed against "b", "a" widens back into the pause before it.
    assert (floored[0]["start"], floored[0]["end"]) == (pytest.approx(0.93), 1.03)
    assert floored[1]["end"] - floored[1]["start"] == pytest.approx(MIN_WORD_S)
    assert floored[1]["start"] == 1.03  # its end moved into the pause after it
    assert floored[2] == words[2]
    # Packed on both sides, a word stays as it was.
    packed = _words([("a", 1.0, 1.5), ("b", 1.5, 1.52), ("c", 1.52, 2.0)])
    assert floor_word_lengths(packed) == packed


def test_a_first_word_timed_onto_the_previous_utterance_moves_to_its_own():
    # "His" starts segment 2, touches "toast." and lies 1.4 s before "statement": the aligner
    # squeezed the end of the previous utterance. It shares "statement"'s span instead.
    words = _words([("dry", 211.9, 211.927), ("toast.", 211.927, 212.0), ("His", 212.0, 212.74),
                    ("statement", 214.13, 214.82), ("of", 214.82, 215.12)])
    piece = Piece(200.0, 220.0, "dry toast. His statement of", words,
                  model_segments=[{"start": 200.0, "end": 212.0, "text": " dry toast."},
                                  {"start": 212.0, "end": 220.0, "text": " His statement of"}])
    _, segments, fixed = assemble([piece])
    his, statement = fixed[2], fixed[3]
    assert his["start"] == 214.13 and his["end"] == statement["start"]
    assert statement["end"] == 214.82
    assert [s["text"] for s in segments] == ["dry toast.", "His statement of"]
    assert segments[1]["start"] == 214.13
    # A word really followed by a pause (not touching the one before it) stays.
    words[2] = {**words[2], "start": 212.3}
    _, _, kept = assemble([Piece(200.0, 220.0, piece.text, words,
                                 model_segments=piece.model_segments)])
    assert kept[2]["start"] == 212.3
