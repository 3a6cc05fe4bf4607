"""The C++ word pass (``oasr._C.alignment``) against a Python statement of its rule.

The rule lives here and nowhere at run time: words are maximal runs of code points that are
neither whitespace (exactly ``str.isspace``) nor of a space-less script (CJK, kana, Hangul);
each space-less code point is its own word; a word's tokens are the ones whose code points
overlap it, its span runs from the first one's start to the last one's end (a token shared by k
words split in k equal parts), its confidence is their mean posterior accumulated left to right;
then spans are made ordered and disjoint and zero-length words share their neighbour's span.
Changing the C++ means changing this oracle.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from oasr.engine.decode.alignment import FrameClock, emission_spans
from oasr.native import native

alignment = native("alignment")

SPACELESS = (
    (0x1100, 0x11FF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0x3130, 0x318F), (0x31F0, 0x31FF),
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F), (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF),
    (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0xFFA0, 0xFFDC), (0x20000, 0x2FA1F), (0x30000, 0x323AF),
)


def oracle_class(cp: int) -> int:
    if chr(cp).isspace():
        return 1
    if any(a <= cp <= b for a, b in SPACELESS):
        return 2
    return 0


def oracle_words(pieces, starts, ends, probs, spf, offset):
    text = "".join(pieces)
    owner = [i for i, p in enumerate(pieces) for _ in p]
    spans = []
    run = None
    for k, ch in enumerate(text):
        c = oracle_class(ord(ch))
        if c == 0:
            run = k if run is None else run
            continue
        if run is not None:
            spans.append((run, k))
            run = None
        if c == 2:
            spans.append((k, k + 1))
    if run is not None:
        spans.append((run, len(text)))
    # Tokens shared by several words are divided among them in equal parts.
    sharing = [0] * len(pieces)
    ranks = []
    for a, b in spans:
        first, last = owner[a], owner[b - 1]
        ranks.append((sharing[first], sharing[first] if first == last else sharing[last]))
        sharing[first] += 1
        if last != first:
            sharing[last] += 1

    def part(t, k):
        if k == 0:
            return starts[t]
        if k == sharing[t]:
            return ends[t]
        return starts[t] + (ends[t] - starts[t]) / sharing[t] * k

    ws, we, lens, words = [], [], [], []
    for (a, b), (r0, r1) in zip(spans, ranks):
        toks = sorted({owner[k] for k in range(a, b)})
        acc = 0.0
        for t in toks:
            acc += probs[t]
        ws.append(part(toks[0], r0))
        we.append(part(toks[-1], r1 + 1))
        lens.append(float(b - a))
        words.append([text[a:b], acc / len(toks)])
    # In order and disjoint, then no zero-length word.
    for w in range(len(ws)):
        if w and ws[w] < we[w - 1]:
            ws[w] = we[w - 1]
        if we[w] < ws[w]:
            we[w] = ws[w]
    w = 0
    while w < len(ws):
        if we[w] > ws[w]:
            w += 1
            continue
        a = b = w
        while b < len(ws) and we[b] <= ws[b]:
            b += 1
        lo = max(0.0, ws[a] - float(b - a))
        hi = lo + float(b - a)
        if b < len(ws):
            lo, hi = ws[b], we[b]
            b += 1
        elif a > 0:
            a -= 1
            lo, hi = ws[a], we[a]
        letters = 0.0
        for k in range(a, b):
            letters += lens[k]
        at = lo
        for k in range(a, b):
            ws[k] = at
            at = hi if k + 1 == b else at + (hi - lo) * lens[k] / letters
            we[k] = at
        w = b
    words = [(t, s * spf + offset, e * spf + offset, c)
             for (t, c), s, e in zip(words, ws, we)]
    total = 0.0
    for p in probs:
        total += p
    conf = total / len(probs) if len(probs) else None
    return words, [s * spf + offset for s in starts], conf


def test_classification_over_the_whole_unicode_plane():
    cps = np.array([c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF], dtype=np.uint32)
    got = alignment.classify(cps)
    spaces = np.array([chr(c).isspace() for c in cps])
    assert np.array_equal(got == 1, spaces)
    assert int(spaces.sum()) == 29
    spaceless = np.zeros(len(cps), dtype=bool)
    for a, b in SPACELESS:
        spaceless |= (cps >= a) & (cps <= b)
    assert np.array_equal(got == 2, spaceless & ~spaces)


ALPHABET = (
    [" ", "\t", "\n", "\u00a0", "\u3000", "\u2028", "\x1c", "\u200b"]  # \u200b is not a space
    + list("abcXYZ.,'-?!") + ["é", "ß", "Ω", "ж"] + list("日本語你好ひらカタ한국") + ["😀", "𠀀"]
)


def random_row(rng: random.Random):
    n = rng.randint(0, 12)
    pieces = ["".join(rng.choice(ALPHABET) for _ in range(rng.choice([0, 1, 1, 2, 3, 4])))
              for _ in range(n)]
    if rng.random() < 0.3:  # code points from anywhere on the plane, surrogates excepted
        for i in range(n):
            cp = rng.randrange(0x110000)
            if not 0xD800 <= cp <= 0xDFFF:
                pieces[i] += chr(cp)
    starts = sorted(rng.uniform(0, 100) for _ in range(n))
    ends = [s + rng.uniform(0, 5) for s in starts]
    probs = [rng.random() for _ in range(n)]
    return pieces, starts, ends, probs


@pytest.mark.parametrize("seed", range(4))
def test_word_pass_equals_the_oracle_on_random_rows(seed):
    rng = random.Random(seed)
    for _ in range(500):
        pieces, starts, ends, probs = random_row(rng)
        spf, offset = rng.choice([0.02, 0.04, 0.06]), rng.uniform(0, 1000)
        got = alignment.word_timings(pieces, np.array(starts, dtype=np.float64),
                                     np.array(ends, dtype=np.float64),
                                     np.array(probs, dtype=np.float64), spf, offset)
        want = oracle_words(pieces, starts, ends, probs, spf, offset)
        assert got[0] == want[0]  # exact: the same float operations in the same order
        assert got[1] == want[1]
        assert got[2] == want[2]
        text = "".join(pieces)
        pos = 0
        for word, *_ in got[0]:  # every word is a literal substring, in order
            pos = text.index(word, pos) + len(word)


def test_word_pass_known_row():
    words, token_starts, conf = alignment.word_timings(
        [" Hello", ",", " wor", "ld", "", " 你好"], np.arange(6.0), np.arange(1.0, 7.0),
        np.array([0.9, 0.8, 0.5, 0.7, 0.1, 0.6]), 0.02, 1.0)
    assert [w[0] for w in words] == ["Hello,", "world", "你", "好"]
    assert words[0][1:3] == (1.0, 1.0 + 2 * 0.02)
    assert words[1][3] == pytest.approx(0.6)
    # The two CJK characters share one token: each gets half its span.
    assert words[2][1:3] == (1.0 + 5 * 0.02, 1.0 + 5.5 * 0.02)
    assert words[3][1:3] == (1.0 + 5.5 * 0.02, 1.0 + 6 * 0.02)
    assert conf == pytest.approx(sum([0.9, 0.8, 0.5, 0.7, 0.1, 0.6]) / 6)
    assert token_starts == pytest.approx([1.0 + 0.02 * i for i in range(6)])


def test_word_pass_gives_no_word_zero_length_and_keeps_spans_disjoint():
    # "going" collapsed onto the next word's start (a span snapped to a pause's end); "b"
    # starts inside "a"; the last word is zero-length at the row's end.
    words, _, _ = alignment.word_timings(
        [" a", " b", " going", " on", " end"], np.array([0.0, 2.0, 10.0, 10.0, 20.0]),
        np.array([4.0, 6.0, 10.0, 16.0, 20.0]), np.full(5, 0.5), 1.0, 0.0)
    spans = [(w[1], w[2]) for w in words]
    assert spans[0] == (0.0, 4.0) and spans[1] == (4.0, 6.0)  # "b" starts where "a" ends
    # "going" and "on" share "on"'s span [10, 16) by letters, 5 : 2; then "end", zero-length
    # at the row's end, shares what "on" kept, 3 : 2.
    going_end = 10.0 + 6.0 * 5 / 7
    on_end = going_end + (16.0 - going_end) * 2 / 5
    assert spans[2] == pytest.approx((10.0, going_end))
    assert spans[3] == pytest.approx((going_end, on_end))
    assert spans[4] == pytest.approx((on_end, 16.0))
    assert all(e > s for s, e in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    single, _, _ = alignment.word_timings([" x"], np.array([3.0]), np.array([3.0]),
                                          np.ones(1), 0.02, 0.0)
    assert single[0][1:3] == (2.0 * 0.02, 3.0 * 0.02)


def test_word_pass_refuses_mismatched_inputs():
    with pytest.raises(ValueError, match="one entry per piece"):
        alignment.word_timings(["a", "b"], np.zeros(1), np.zeros(2), np.zeros(2), 0.02, 0.0)
    assert alignment.word_timings([], np.zeros(0), np.zeros(0), np.zeros(0), 0.02, 0.0) == (
        [], [], None)


def oracle_dtw(cost: np.ndarray) -> tuple[list[int], list[int]]:
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    acc[0, 0] = 0
    move = np.zeros((n + 1, m + 1), dtype=np.int8)
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            d, u, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
            if d < u and d < left:
                best, step = d, 0
            elif u < d and u < left:
                best, step = u, 1
            else:
                best, step = left, 2
            acc[i, j] = np.float32(cost[i - 1, j - 1]) + best
            move[i, j] = step
    i, j, ti, fi = n, m, [], []
    while i > 0 or j > 0:
        ti.append(i - 1)
        fi.append(j - 1)
        step = 2 if i == 0 else 1 if j == 0 else move[i, j]
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    return ti[::-1], fi[::-1]


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 1), (4, 9), (9, 30), (12, 12)])
def test_dtw_equals_the_oracle(shape):
    rng = np.random.default_rng(sum(shape))
    for quantized in (False, True):  # quantized costs exercise the tie rules
        cost = rng.standard_normal(shape).astype(np.float32)
        if quantized:
            cost = np.round(cost).astype(np.float32)
        ti, fi = alignment.dtw(cost)
        want = oracle_dtw(cost)
        assert ti.tolist() == want[0] and fi.tolist() == want[1]
        assert ti[0] == fi[0] == 0 and ti[-1] == shape[0] - 1 and fi[-1] == shape[1] - 1
        steps = np.stack([np.diff(ti), np.diff(fi)], 1)
        assert ((steps >= 0) & (steps <= 1)).all() and (steps.sum(1) >= 1).all()


def oracle_snap(starts, ends, joins, pauses):
    s, e = list(starts), list(ends)
    n = len(s)
    for ps, pe in pauses:
        for k in range(n):
            if e[k] <= ps or s[k] >= pe:
                continue
            if joins[k] and k > 0:
                if s[k] < ps:
                    e[k] = ps
                else:
                    s[k] = e[k] = ps
                if k + 1 < n and s[k + 1] > pe:
                    s[k + 1] = pe
                continue
            if s[k] >= ps and e[k] <= pe:
                s[k] = e[k] = pe
                continue
            if s[k] < ps and e[k] > pe:
                e[k] = ps
                if k + 1 < n and e[k + 1] > pe:
                    s[k + 1] = pe
            elif s[k] < ps:
                e[k] = ps
            else:
                s[k] = pe
    return s, e


def test_snap_to_pauses_equals_the_oracle():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(0, 10)
        bounds = sorted(rng.randint(0, 60) for _ in range(n + 1))
        starts, ends = bounds[:-1], bounds[1:]  # tiling spans, as DTW gives
        cuts = sorted(rng.sample(range(0, 70), 2 * rng.randint(0, 3)))
        pauses = list(zip(cuts[::2], cuts[1::2]))
        joins = [rng.random() < 0.3 for _ in range(n)]
        got = alignment.snap_to_pauses(np.array(starts, dtype=np.float64),
                                       np.array(ends, dtype=np.float64),
                                       np.array(joins, dtype=np.uint8),
                                       np.array([p[0] for p in pauses], dtype=np.float64),
                                       np.array([p[1] for p in pauses], dtype=np.float64))
        want = oracle_snap(starts, ends, joins, pauses)
        assert got[0].tolist() == want[0] and got[1].tolist() == want[1]


def test_snap_moves_a_sentence_end_off_the_pause_and_the_next_word_onto_speech():
    # "blood" runs through a pause [10, 15); "And" starts late at 18.
    s, e = alignment.snap_to_pauses(np.array([0.0, 5.0, 18.0]), np.array([5.0, 18.0, 20.0]),
                                    np.zeros(3, dtype=np.uint8), np.array([10.0]),
                                    np.array([15.0]))
    assert s.tolist() == [0.0, 5.0, 15.0] and e.tolist() == [5.0, 10.0, 20.0]
    # " been" reaches into the pause [79, 108) and "." was placed after it, on the speech of
    # the next word: the full stop stays with "been", " I" starts where speech resumes.
    s, e = alignment.snap_to_pauses(np.array([44.0, 80.0, 136.0]), np.array([80.0, 136.0, 148.0]),
                                    np.array([0, 1, 0], dtype=np.uint8), np.array([79.0]),
                                    np.array([108.0]))
    assert s.tolist() == [44.0, 79.0, 108.0] and e.tolist() == [79.0, 79.0, 148.0]
    # A word's first token inside a pause starts with the speech after it.
    s, e = alignment.snap_to_pauses(np.array([5.0, 19.0, 21.0]), np.array([8.0, 19.5, 25.0]),
                                    np.array([0, 0, 0], dtype=np.uint8), np.array([8.0]),
                                    np.array([20.0]))
    assert s.tolist() == [5.0, 20.0, 21.0] and e.tolist() == [8.0, 20.0, 25.0]


def test_emission_spans_tile_to_the_utterance_end():
    starts, ends = emission_spans([3, 7, 8], 12)
    assert starts.tolist() == [3, 7, 8] and ends.tolist() == [7, 8, 12]
    assert emission_spans([], 5)[0].size == 0


def test_frame_clock_needs_all_three_numbers():
    from oasr.features import FeatureConfig
    from oasr.models.base import BaseEncoder

    class Enc(BaseEncoder):
        subsampling_rate = 2

    class Model:
        encoder = Enc()

    feat = FeatureConfig("fbank", frame_shift_ms=10.0)
    assert FrameClock.resolve(Model(), feat).seconds_per_frame == pytest.approx(0.02)
    lfr = FeatureConfig("fbank", frame_shift_ms=10.0, lfr_m=7, lfr_n=6)
    assert FrameClock.resolve(Model(), lfr).seconds_per_frame == pytest.approx(0.12)
    assert FrameClock.resolve(Model(), None) is None
    Model.encoder = BaseEncoder()  # declares no subsampling rate
    assert FrameClock.resolve(Model(), feat) is None
