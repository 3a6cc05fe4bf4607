"""Long-recording windowing and transcript stitching.

Oracle for stitching: a known word sequence with known word times; each simulated window transcript
holds the words timed inside it, so the recording's text is known exactly and the stitched text must
reproduce it (or differ only where a perturbation forces it).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import jiwer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oasr.engine.longform import (
    StitchResult,
    Window,
    WindowText,
    normalize_word,
    plan_windows,
    stitch,
)

SEGMENTS_JSON = Path("/work/shared/data/longform/librispeech-test-other-70.segments.json")

# A small Zipf-like vocabulary: frequent function words make repeated bigrams ("of the") common,
# which is what a seam matcher must not be fooled by.
VOCAB = (
    "the of and to a in that it was he i his you with for had as her on at by which but not "
    "be from this they she all have were one we so said there an my if would me no what when "
    "lobster margaret window mister river garden whisper silver morning kingdom lantern"
).split()
WEIGHTS = [1.0 / (rank + 1) for rank in range(len(VOCAB))]


def make_speech(seed: int, duration: float) -> tuple[list[str], list[float]]:
    """Words with times in ``(0, duration)``; the speaking rate drifts between ~1.7 and 5 words/s
    so that a uniform-over-window position estimate is only approximate."""
    rng = random.Random(seed)
    words, times, t = [], [], 0.0
    while True:
        t += rng.uniform(0.2, 0.6)
        if t >= duration:
            return words, times
        words.append(rng.choices(VOCAB, WEIGHTS)[0])
        times.append(t)


def window_words(words: list[str], times: list[float], w: Window) -> list[int]:
    """Indices of the words whose time lies in the window."""
    return [k for k, t in enumerate(times) if w.start <= t < w.end]


def ideal_pieces(words: list[str], times: list[float], windows: list[Window]) -> list[WindowText]:
    return [
        WindowText(w, " ".join(words[k] for k in window_words(words, times, w))) for w in windows
    ]


def assert_tiles(result: StitchResult, pieces: list[WindowText]) -> None:
    """Segments tile [first start, last end] contiguously, join to the text, and each holds a
    contiguous slice of its own window's tokens."""
    segs = result.segments
    assert len(segs) == len(pieces)
    assert segs[0]["start"] == pieces[0].window.start
    assert segs[-1]["end"] == pieces[-1].window.end
    for prev, nxt in zip(segs, segs[1:], strict=False):
        assert prev["end"] == nxt["start"]
    for seg, piece in zip(segs, pieces, strict=True):
        assert seg["start"] <= seg["end"]
        assert piece.window.start <= seg["start"] and seg["end"] <= piece.window.end
        own, mine = piece.text.split(), seg["text"].split()
        assert any(own[k : k + len(mine)] == mine for k in range(len(own) - len(mine) + 1))
    assert " ".join(s["text"] for s in segs if s["text"]) == result.text


# ---------------------------------------------------------------------------------------------
# plan_windows


@pytest.mark.parametrize("duration", [0.0, 0.5, 12.25, 30.0])
def test_short_recording_is_one_window(duration: float) -> None:
    assert plan_windows(duration) == [Window(0, 0.0, duration)]


def test_last_window_is_shifted_left_to_end_at_duration() -> None:
    # Stride 25: windows start at 0 and 25; the third would be [50, 80], shifted to [40, 70].
    assert plan_windows(70.0) == [
        Window(0, 0.0, 30.0),
        Window(1, 25.0, 55.0),
        Window(2, 40.0, 70.0),
    ]


def test_short_tail_is_merged_into_previous_window() -> None:
    # [0, 30] and [25, 55] leave 0.5 s: the second window slides to end at 55.5 instead of a third.
    assert plan_windows(55.5) == [Window(0, 0.0, 30.0), Window(1, 25.5, 55.5)]
    # The first window cannot slide (it must start at 0), so a second, shifted window is needed.
    assert plan_windows(30.5) == [Window(0, 0.0, 30.0), Window(1, 0.5, 30.5)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"duration_s": -1.0}, "duration_s"),
        ({"duration_s": math.inf}, "finite"),
        ({"duration_s": math.nan}, "finite"),
        ({"duration_s": 60.0, "window_s": 0.0}, "window_s"),
        ({"duration_s": 60.0, "overlap_s": 30.0}, "overlap_s"),
        ({"duration_s": 60.0, "overlap_s": 31.0}, "overlap_s"),
        ({"duration_s": 60.0, "overlap_s": -0.1}, "overlap_s"),
        ({"duration_s": 60.0, "min_last_s": -1.0}, "min_last_s"),
    ],
)
def test_plan_windows_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_windows(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    windows_long=st.floats(0.0, 100.0),
    window_s=st.floats(0.5, 60.0),
    overlap_frac=st.floats(0.0, 0.9),
    min_last_s=st.floats(0.0, 5.0),
)
def test_plan_windows_properties(
    windows_long: float, window_s: float, overlap_frac: float, min_last_s: float
) -> None:
    duration = windows_long * window_s
    overlap_s = overlap_frac * window_s
    windows = plan_windows(duration, window_s, overlap_s, min_last_s)
    eps = 1e-6 * max(1.0, duration)
    assert [w.index for w in windows] == list(range(len(windows)))
    assert windows[0].start == 0.0
    assert windows[-1].end == pytest.approx(duration, abs=eps)
    for w in windows:
        assert w.duration <= window_s + eps
        # Every window is full-length: Whisper is never fed a padded short window.
        assert w.duration == pytest.approx(min(window_s, duration), abs=eps)
    pairs = list(zip(windows, windows[1:], strict=False))
    for prev, nxt in pairs:
        assert prev.start < nxt.start <= prev.end  # ordered, no gap
    for prev, nxt in pairs[:-1]:
        assert prev.end - nxt.start == pytest.approx(overlap_s, abs=eps)
    if pairs:
        prev, last = pairs[-1]
        assert prev.end - last.start >= overlap_s / 2 - eps
        assert prev.end < duration  # the last window is needed
        new_audio = last.end - prev.end
        shifted_left = prev.end - last.start >= overlap_s - eps  # else: slid right, merged
        if len(windows) >= 3 and shifted_left and new_audio < min_last_s:
            assert new_audio > overlap_s / 2  # merging it would have starved the overlap


def test_plan_windows_duration_at_a_float_multiple_of_the_window() -> None:
    """34 * w rounds just above 33 * w + w: that is no tail and must not add a 35th window."""
    w = 31.785126206063637
    windows = plan_windows(34 * w, w, 0.0, 0.0)
    assert len(windows) == 34
    assert all(a.end == b.start for a, b in zip(windows, windows[1:], strict=False))


def test_sample_slice() -> None:
    assert Window(0, 1.5, 2.0).sample_slice(16000) == slice(24000, 32000)


# ---------------------------------------------------------------------------------------------
# stitch: synthetic speech


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    duration=st.floats(31.0, 240.0),
    window_s=st.sampled_from([30.0, 20.0]),
    overlap_s=st.sampled_from([5.0, 4.0, 8.0]),
)
def test_stitch_reconstructs_ideal_windows(
    seed: int, duration: float, window_s: float, overlap_s: float
) -> None:
    words, times = make_speech(seed, duration)
    windows = plan_windows(duration, window_s, overlap_s)
    pieces = ideal_pieces(words, times, windows)
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


@pytest.mark.parametrize("seed", range(6))
def test_stitch_drops_misrecognized_edge_words(seed: int) -> None:
    """A window edge cuts a word: A's last and B's first word come out wrong."""
    words, times = make_speech(seed, 200.0)
    windows = plan_windows(200.0)
    pieces = []
    for i, w in enumerate(windows):
        toks = [words[k] for k in window_words(words, times, w)]
        if i > 0:
            toks[0] = "qqq"
        if i < len(windows) - 1:
            toks[-1] = "zzz"
        pieces.append(WindowText(w, " ".join(toks)))
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("missing", [1, 2])
def test_stitch_survives_missing_edge_words(seed: int, missing: int) -> None:
    """The decoder skips the partial words at both edges of every window."""
    words, times = make_speech(seed, 200.0)
    windows = plan_windows(200.0)
    pieces = []
    for i, w in enumerate(windows):
        idx = window_words(words, times, w)
        lo = missing if i > 0 else 0
        hi = len(idx) - missing if i < len(windows) - 1 else len(idx)
        pieces.append(WindowText(w, " ".join(words[k] for k in idx[lo:hi])))
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


@pytest.mark.parametrize("seed", range(6))
def test_stitch_ignores_casing_and_punctuation_at_seams(seed: int) -> None:
    words, times = make_speech(seed, 150.0)
    windows = plan_windows(150.0)
    pieces = []
    for i, w in enumerate(windows):
        toks = [words[k] for k in window_words(words, times, w)]
        if i > 0:  # B starts a sentence and adds commas in the overlap
            toks[0] = toks[0].capitalize()
            toks[1:6] = [t + "," for t in toks[1:6]]
        if i < len(windows) - 1:  # A ends one
            toks[-1] = toks[-1].upper() + "."
            toks.insert(len(toks) - 3, "--")  # a punctuation-only token
        pieces.append(WindowText(w, " ".join(toks)))
    result = stitch(pieces)
    out = [n for n in map(normalize_word, result.text.split()) if n]
    assert out == words
    assert_tiles(result, pieces)


@pytest.mark.parametrize("seed", range(6))
def test_stitch_one_substitution_inside_overlap(seed: int) -> None:
    """A mis-recognizes a word in the middle of each overlap: at most that word differs, and no
    word is duplicated or lost."""
    words, times = make_speech(seed, 200.0)
    windows = plan_windows(200.0)
    pieces = []
    for i, w in enumerate(windows):
        idx = window_words(words, times, w)
        toks = [words[k] for k in idx]
        if i < len(windows) - 1:
            seam = 0.5 * (windows[i + 1].start + w.end)
            mid = min(range(len(idx)), key=lambda p: abs(times[idx[p]] - seam))
            toks[mid] = "xyzzy"
        pieces.append(WindowText(w, " ".join(toks)))
    result = stitch(pieces)
    out = result.text.split()
    assert len(out) == len(words)
    wrong = [k for k, (a, b) in enumerate(zip(out, words, strict=True)) if a != b]
    assert all(out[k] == "xyzzy" for k in wrong)
    assert len(wrong) <= len(windows) - 1
    assert_tiles(result, pieces)


def paused_speech(seed: int) -> tuple[list[str], list[float], list[Window]]:
    """~2.5 words/s with a pause over [22, 33) s, which covers the first overlap [25, 30]."""
    rng = random.Random(seed)
    times = [t for t in (0.4 * k + 0.2 for k in range(300)) if not 22.0 <= t < 33.0]
    words = [rng.choices(VOCAB, WEIGHTS)[0] for _ in times]
    windows = plan_windows(times[-1] + 0.3)
    assert windows[0].end - windows[1].start == 5.0
    return words, times, windows


def test_stitch_keeps_both_sides_of_a_silent_overlap() -> None:
    """Without word times the overlap's silence is invisible; no word is shared, so none may be
    dropped (a uniform time split would drop the words nearest the pause)."""
    _, times, windows = paused_speech(0)
    words = [f"w{k}" for k in range(len(times))]
    pieces = ideal_pieces(words, times, windows)
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


def test_stitch_one_lookalike_off_the_edge_is_not_a_match() -> None:
    """A "the" is A's second-to-last and B's first word across a silent overlap: one match that
    needs one unmatched word is not trusted, so both sides are kept."""
    _, times, windows = paused_speech(0)
    words = [f"w{k}" for k in range(len(times))]
    before = max(k for k, t in enumerate(times) if t < 22.0)
    words[before - 1] = words[before + 1] = "the"
    result = stitch(ideal_pieces(words, times, windows))
    assert result.text == " ".join(words)


@pytest.mark.parametrize("seed", range(4))
def test_stitch_word_times_veto_lookalikes_across_a_silent_overlap(seed: int) -> None:
    """The same word on both sides of the pause: by text alone it looks shared; decoder times
    (11 s apart) say it is two words, and the time split at the seam keeps both."""
    words, times, windows = paused_speech(seed)
    before = max(k for k, t in enumerate(times) if t < 22.0)
    words[before] = words[before + 1] = "the"
    pieces = []
    for w in windows:
        idx = window_words(words, times, w)
        timed = [(words[k], times[k] - 0.1, times[k] + 0.1) for k in idx]
        pieces.append(WindowText(w, " ".join(words[k] for k in idx), words=timed))
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


def test_stitch_nested_last_window_emits_each_word_once() -> None:
    """Windows [0, 30], [25, 55], [27, 57]: the last two share 28 s."""
    words, times = make_speech(3, 57.0)
    windows = plan_windows(57.0)
    assert [(w.start, w.end) for w in windows] == [(0.0, 30.0), (25.0, 55.0), (27.0, 57.0)]
    pieces = ideal_pieces(words, times, windows)
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


def test_stitch_interpolates_missing_word_times() -> None:
    """No shared word, so the time split at the seam (9 s) decides, using interpolated times."""
    w0, w1 = Window(0, 0.0, 10.0), Window(1, 8.0, 18.0)
    a_words = [
        ("alpha", 1.0, 1.2),
        ("beta", None, None),
        ("gamma", None, None),
        ("delta", None, 9.9),
    ]
    b_words = [
        ("echo", None, None),
        ("foxtrot", 8.1, 8.3),
        ("golf", None, None),
        ("hotel", 17.0, 17.2),
    ]
    # beta, gamma: 4.03 s, 6.97 s (kept); delta: 9.9 s (dropped).
    # echo: 8.1 s, between the window start and foxtrot (dropped); golf: 12.65 s (kept).
    result = stitch([WindowText(w0, "", words=a_words), WindowText(w1, "", words=b_words)])
    assert result.text == "alpha beta gamma golf hotel"
    assert [s["text"] for s in result.segments] == ["alpha beta gamma", "golf hotel"]


def test_stitch_keeps_text_next_to_empty_windows() -> None:
    words = [f"w{k}" for k in range(80)]
    times = [0.25 * k + 0.1 for k in range(40)] + [70.0 + 0.25 * k for k in range(40)]
    windows = plan_windows(90.0)
    pieces = ideal_pieces(words, times, windows)
    assert pieces[1].text == ""  # [25, 55] holds no speech
    result = stitch(pieces)
    assert result.text == " ".join(words)
    assert_tiles(result, pieces)


def test_stitch_all_empty_and_trivial_inputs() -> None:
    windows = plan_windows(80.0)
    result = stitch([WindowText(w, "") for w in windows])
    assert result.text == ""
    assert [s["text"] for s in result.segments] == ["", "", ""]
    assert stitch([]) == StitchResult("", [])
    single = stitch([WindowText(Window(0, 0.0, 12.0), "Hello, world.")])
    assert single.text == "Hello, world."
    assert single.segments == [{"start": 0.0, "end": 12.0, "text": "Hello, world."}]


def test_stitch_rejects_disordered_or_gapped_windows() -> None:
    a, b = Window(0, 0.0, 30.0), Window(1, 25.0, 55.0)
    with pytest.raises(ValueError, match="order"):
        stitch([WindowText(b, "x"), WindowText(a, "y")])
    with pytest.raises(ValueError, match="gap"):
        stitch([WindowText(a, "x"), WindowText(Window(1, 31.0, 61.0), "y")])


# ---------------------------------------------------------------------------------------------
# stitch: real timing distribution (LibriSpeech test-other, 70 utterances, ~9.5 min)


def reference_words() -> tuple[list[str], list[float], float]:
    """Reference words, each placed uniformly inside its utterance's true [start, end]."""
    segments = json.loads(SEGMENTS_JSON.read_text())
    words, times = [], []
    for seg in segments:
        toks = seg["text"].split()
        span = seg["end"] - seg["start"]
        for k, tok in enumerate(toks):
            words.append(tok)
            times.append(seg["start"] + (k + 0.5) * span / len(toks))
    return words, times, segments[-1]["end"]


@pytest.mark.skipif(not SEGMENTS_JSON.exists(), reason=f"needs {SEGMENTS_JSON}")
@pytest.mark.parametrize(
    "window_s, overlap_s", [(30.0, 5.0), (30.0, 10.0), (20.0, 4.0), (10.0, 3.0)]
)
@pytest.mark.parametrize("garble_edges", [False, True])
def test_stitch_librispeech_ideal_windows_zero_wer(
    window_s: float, overlap_s: float, garble_edges: bool
) -> None:
    words, times, duration = reference_words()
    windows = plan_windows(duration, window_s, overlap_s)
    pieces = []
    for i, w in enumerate(windows):
        toks = [words[k] for k in window_words(words, times, w)]
        if garble_edges and toks:
            if i > 0:
                toks[0] = "qqq"
            if i < len(windows) - 1:
                toks[-1] = "zzz"
        pieces.append(WindowText(w, " ".join(toks)))
    result = stitch(pieces)
    reference = " ".join(words)
    assert jiwer.wer(reference, result.text) == 0.0
    assert result.text == reference
    assert_tiles(result, pieces)
