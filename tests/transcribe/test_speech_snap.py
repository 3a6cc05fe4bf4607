"""Word edges moved out of the coverage detector's pauses (oasr.transcribe.speech_snap)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oasr.transcribe.segments import Piece, assemble
from oasr.transcribe.speech_snap import SpeechSnapRules, snap_to_speech


def w(word: str, start: float, end: float) -> dict:
    return {"word": word, "start": start, "end": end, "confidence": 0.9}


def times(words: list[dict]) -> list[tuple[float, float]]:
    return [(x["start"], x["end"]) for x in words]


def test_a_first_word_stretched_over_the_pause_starts_with_the_speech():
    words = [w("done.", 1.0, 2.0), w("Then", 2.1, 4.3), w("we", 4.3, 4.6)]
    speech = [(0.9, 2.05), (4.0, 6.0)]
    out = snap_to_speech(words, speech)
    assert times(out) == [(1.0, 2.0), (4.0, 4.3), (4.3, 4.6)]


def test_a_detector_onset_a_little_late_does_not_move_the_word():
    # Silero's onsets run late on quiet speech: 0.4 s is within its slack, the word stays.
    words = [w("You", 3.6, 3.9), w("see", 3.9, 4.2)]
    out = snap_to_speech(words, [(4.0, 6.0)])
    assert times(out) == times(words)


def test_a_last_word_stretched_into_the_pause_ends_with_the_speech():
    words = [w("lobster", 10.0, 10.4), w("fat.", 10.4, 12.0), w("That", 13.0, 13.3)]
    out = snap_to_speech(words, [(8.0, 10.9), (13.0, 14.0)])
    assert times(out) == [(10.0, 10.4), (10.4, 10.9), (13.0, 13.3)]


def test_a_word_wholly_in_the_pause_that_opens_a_sentence_moves_to_the_next_speech():
    words = [w("crayfish.", 89.4, 89.9), w("My", 90.2, 90.4), w("best", 91.58, 92.2)]
    out = snap_to_speech(words, [(85.0, 89.95), (91.62, 95.0)])
    assert out[1]["start"] == 91.62
    assert out[0]["end"] <= out[1]["start"] < out[1]["end"] <= out[2]["start"] < out[2]["end"]
    assert out[2]["end"] == 92.2


def test_a_lowercase_word_in_the_pause_after_an_unpunctuated_word_stays():
    words = [w("the", 1.0, 1.5), w("cat", 2.0, 2.2), w("sat", 3.0, 3.4)]
    out = snap_to_speech(words, [(0.9, 1.6), (2.9, 4.0)])
    assert times(out) == times(words)


def test_a_lone_sentence_opener_before_a_pause_moves_across_it():
    # Whisper closed a segment after "But": the aligner left it at the end of the previous
    # utterance; the next utterance starts after 1.8 s of pause.
    words = [w("lovely.", 185.89, 185.99), w("But", 186.0, 186.75), w("I", 188.62, 189.62),
             w("am", 189.62, 189.92)]
    out = snap_to_speech(words, [(181.95, 186.82), (188.64, 188.96), (189.34, 192.16)])
    assert out[1]["start"] == 188.64
    assert out[1]["end"] <= out[2]["start"] < out[2]["end"] == 189.62


def test_a_one_word_sentence_before_a_pause_stays():
    words = [w("done.", 1.0, 1.4), w("Yes.", 1.5, 1.9), w("Then", 3.0, 3.3)]
    out = snap_to_speech(words, [(0.9, 2.0), (3.0, 4.0)])
    assert times(out) == times(words)


def test_words_past_the_settled_part_are_left_alone():
    words = [w("a", 1.0, 1.3), w("Long", 1.3, 4.5)]
    speech = [(0.9, 1.25), (3.0, 5.0)]
    assert times(snap_to_speech(words, speech, until=4.0)) == times(words)
    assert snap_to_speech(words, speech, until=9.0)[1]["start"] == 3.0


def test_no_speech_or_no_words_change_nothing():
    words = [w("a", 1.0, 1.3)]
    assert snap_to_speech(words, []) == words
    assert snap_to_speech([], [(0.0, 1.0)]) == []


def test_the_margin_is_the_rule_s():
    words = [w("Then", 2.1, 4.3)]
    speech = [(4.0, 6.0)]
    assert snap_to_speech(words, speech)[0]["start"] == 4.0  # 1.9 s into the pause
    loose = SpeechSnapRules(min_move_s=2.0)
    assert snap_to_speech(words, speech, rules=loose)[0]["start"] == 2.1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 1.5),
                          st.sampled_from(["Yes.", "the", "But", "cat,", "My"])),
                min_size=1, max_size=12),
       st.lists(st.tuples(st.floats(0.0, 30.0), st.floats(0.05, 5.0)), max_size=6))
def test_words_stay_in_order_disjoint_and_counted(steps, spans):
    words, t = [], 0.0
    for gap, length, text in steps:
        t += gap
        words.append(w(text, round(t, 3), round(t + length, 3)))
        t += length
    speech = [(a, a + n) for a, n in spans]
    out = snap_to_speech(words, speech)
    assert [x["word"] for x in out] == [x["word"] for x in words]
    for x in out:
        assert x["start"] <= x["end"]
    for a, b in zip(out, out[1:]):
        assert a["end"] <= b["start"] + 1e-9


def test_assemble_builds_segments_from_the_moved_words():
    text = " done. Then we"
    piece = Piece(0.0, 6.0, text, [w(" done.", 1.0, 2.0), w(" Then", 2.1, 4.3),
                                   w(" we", 4.3, 4.6)])
    _, segments, words = assemble([piece], speech=[(0.9, 2.05), (4.0, 6.0)])
    assert words[1]["start"] == 4.0
    assert segments[-1]["start"] == 4.0 and segments[-1]["end"] == 4.6
    _, plain, unmoved = assemble([piece])
    assert unmoved[1]["start"] == 2.1 and plain[0]["start"] == 1.0
