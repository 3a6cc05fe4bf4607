"""The CPU CTC decoders (``oasr._C.ctc``): greedy and WeNet-style prefix beam search.

Oracles, each written here and independent of the C++:
  * greedy: a numpy best path;
  * prefix beam, exactness: a brute-force enumeration of every label path of a tiny problem
    (V = 3-4, T <= 6), giving each labeling's exact probability and its best path; a beam at
    least as wide as the number of labelings keeps everything, so it must match exactly;
  * prefix beam, pruning: a plain-Python statement of WeNet's ``ctc_prefix_beam_search``
    (dict keyed by the prefix tuple, list copies for the frames) at beams 4-10;
  * blank skipping: decoding with skips equals decoding the frames that remain;
  * re-entry: a prefix that leaves the beam and comes back while its extension stayed is still
    one prefix (WeNet's dict merges the two ways of reaching a token sequence).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest

ctc = pytest.importorskip("oasr._C").ctc

NEG_INF = float("-inf")


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def random_log_probs(rng: np.random.Generator, b: int, t: int, v: int, scale: float = 2.0,
                     blank_bias: float = 0.0) -> np.ndarray:
    logits = rng.standard_normal((b, t, v)) * scale
    logits[..., 0] += blank_bias
    return log_softmax(logits)


def posterior(lp: np.ndarray, length: int, tok: int, t: int) -> float:
    p = lp[t, tok]
    if t + 1 < length:
        p = max(p, lp[t + 1, tok])
    return math.exp(float(p))


# -- oracles ------------------------------------------------------------------------------------


def ref_greedy(lp: np.ndarray, length: int, blank: int):
    best = lp[:length].argmax(-1)
    tokens, frames, prev = [], [], blank
    for t, u in enumerate(best.tolist()):
        if u != blank and u != prev:
            tokens.append(u)
            frames.append(t)
        prev = u
    score = 0.0
    for t in range(length):
        score += float(lp[t, best[t]])
    return tokens, frames, score


def log_add(a: float, b: float) -> float:
    if a == NEG_INF and b == NEG_INF:
        return NEG_INF
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


class Entry:
    """One prefix's state: sums and maxima of its blank- / token-ending paths, and the frames
    of the two best paths."""

    def __init__(self) -> None:
        self.s = self.ns = self.vs = self.vns = NEG_INF
        self.fs: list[int] = []
        self.fns: list[int] = []

    def score(self) -> float:
        return log_add(self.s, self.ns)

    def vit(self) -> float:
        return max(self.vs, self.vns)

    def frames(self) -> list[int]:
        return self.fs if self.vs > self.vns else self.fns


def wenet_prefix_beam(lp: np.ndarray, length: int, blank: int, beam: int, skip: float = 1.0,
                      trace: list[list[tuple[int, ...]]] | None = None,
                      ) -> list[tuple[tuple[int, ...], float, list[int]]]:
    """WeNet's ctc_prefix_beam_search restated, frames recorded at the first frame of a run,
    blank skipping as WeNet's WFST decoder does it (replay the last skipped frame between two
    equal argmaxes). ``trace``, when given, receives each step's surviving prefixes."""
    root = Entry()
    root.s, root.vs, root.vns = 0.0, 0.0, 0.0
    hyps: list[tuple[tuple[int, ...], Entry]] = [((), root)]

    def step(t: int) -> list[tuple[tuple[int, ...], Entry]]:
        row = lp[t]
        order = np.argsort(-row, kind="stable")[:beam]
        nxt: dict[tuple[int, ...], Entry] = defaultdict(Entry)
        for u in order.tolist():
            p = float(row[u])
            for prefix, e in hyps:
                last = prefix[-1] if prefix else None
                if u == blank:
                    n = nxt[prefix]
                    n.s = log_add(n.s, e.score() + p)
                    n.vs = e.vit() + p
                    n.fs = list(e.frames())
                elif u == last:
                    n = nxt[prefix]
                    n.ns = log_add(n.ns, e.ns + p)
                    if n.vns < e.vns + p:
                        n.vns = e.vns + p
                        n.fns = list(e.fns)
                    n2 = nxt[prefix + (u,)]
                    n2.ns = log_add(n2.ns, e.s + p)
                    if n2.vns < e.vs + p:
                        n2.vns = e.vs + p
                        n2.fns = e.fs + [t]
                else:
                    n = nxt[prefix + (u,)]
                    n.ns = log_add(n.ns, e.score() + p)
                    if n.vns < e.vit() + p:
                        n.vns = e.vit() + p
                        n.fns = e.frames() + [t]
        ranked = sorted(nxt.items(), key=lambda kv: kv[1].score(), reverse=True)
        kept = [kv for kv in ranked if kv[1].score() > NEG_INF][:beam]
        if trace is not None:
            trace.append([prefix for prefix, _ in kept])
        return kept

    prev_skipped, last_skipped, last_best = False, -1, -1
    for t in range(length):
        if math.exp(float(lp[t, blank])) > skip:
            prev_skipped, last_skipped = True, t
            continue
        best = int(np.argmax(lp[t]))
        if prev_skipped and best != blank and best == last_best:
            hyps = step(last_skipped)
        hyps = step(t)
        last_best, prev_skipped = best, False
    return [(p, e.score(), e.frames()) for p, e in hyps]


def brute_force(lp: np.ndarray, blank: int):
    """Every labeling's exact log-probability and its best path's first-emission frames."""
    t_len, v = lp.shape
    total: dict[tuple[int, ...], float] = {}
    best: dict[tuple[int, ...], tuple[float, list[int]]] = {}
    for path in itertools.product(range(v), repeat=t_len):
        logp = sum(float(lp[t, u]) for t, u in enumerate(path))
        labels, frames, prev = [], [], blank
        for t, u in enumerate(path):
            if u != blank and u != prev:
                labels.append(u)
                frames.append(t)
            prev = u
        key = tuple(labels)
        total[key] = np.logaddexp(total.get(key, NEG_INF), logp)
        if key not in best or logp > best[key][0]:
            best[key] = (logp, frames)
    return total, best


def as_tuple(h) -> tuple[int, ...]:
    return tuple(h.tokens.tolist())


# -- greedy -------------------------------------------------------------------------------------


@pytest.mark.parametrize("blank", [0, 3])
def test_greedy_matches_numpy_best_path(blank):
    rng = np.random.default_rng(0)
    lp = random_log_probs(rng, 6, 40, 12, blank_bias=1.0)
    lens = np.array([40, 33, 1, 0, 17, 40])
    out = ctc.greedy(lp, lens, blank)
    assert len(out) == 6
    for b, h in enumerate(out):
        tokens, frames, score = ref_greedy(lp[b], lens[b], blank)
        assert h.tokens.tolist() == tokens
        assert h.frames.tolist() == frames
        assert h.score == pytest.approx(score, abs=1e-9)
        want = [posterior(lp[b], lens[b], u, t) for u, t in zip(tokens, frames)]
        np.testing.assert_allclose(h.probs, want, rtol=1e-12)


def test_greedy_keeps_blank_separated_repeats():
    v = 3
    path = [1, 1, 0, 1, 2, 2, 0, 0, 2]
    lp = np.full((1, len(path), v), math.log(0.05), dtype=np.float32)
    for t, u in enumerate(path):
        lp[0, t, u] = math.log(0.9)
    h = ctc.greedy(lp, np.array([len(path)]), 0)[0]
    assert h.tokens.tolist() == [1, 1, 2, 2]
    assert h.frames.tolist() == [0, 3, 4, 8]


# -- prefix beam: exactness ---------------------------------------------------------------------


@pytest.mark.parametrize("seed,t_len,v,blank", [(0, 5, 3, 0), (1, 6, 3, 2), (2, 5, 4, 0),
                                                (3, 6, 4, 1), (4, 4, 4, 3)])
def test_prefix_beam_is_exact_when_nothing_is_pruned(seed, t_len, v, blank):
    rng = np.random.default_rng(seed)
    lp = random_log_probs(rng, 1, t_len, v, scale=1.5)
    total, best = brute_force(lp[0], blank)
    width = len(total) + 1  # every labeling survives every frame
    hyps = ctc.prefix_beam(lp, np.array([t_len]), blank, width, 1.0, width)[0]
    assert len(hyps) == len(total)
    ranked = sorted(total, key=total.get, reverse=True)
    for h, key in zip(hyps[:10], ranked[:10]):
        assert as_tuple(h) == key
        assert h.score == pytest.approx(total[key], abs=1e-9)
        assert h.frames.tolist() == best[key][1]
        want = [posterior(lp[0], t_len, u, t) for u, t in zip(key, best[key][1])]
        np.testing.assert_allclose(h.probs, want, rtol=1e-12)
    # The scores are a distribution over labelings.
    assert np.logaddexp.reduce([h.score for h in hyps]) == pytest.approx(
        np.logaddexp.reduce(list(total.values())), abs=1e-9)


# -- prefix beam: against WeNet's algorithm -----------------------------------------------------


@pytest.mark.parametrize("beam", [4, 6, 10])
def test_prefix_beam_matches_wenet_statement(beam):
    rng = np.random.default_rng(10 + beam)
    b, t_len, v = 4, 50, 24
    lp = random_log_probs(rng, b, t_len, v, scale=2.5, blank_bias=1.5)
    lens = np.array([50, 44, 31, 7])
    out = ctc.prefix_beam(lp, lens, 0, beam, 1.0, beam)
    for row in range(b):
        want = wenet_prefix_beam(lp[row], lens[row], 0, beam)
        got = out[row]
        assert [as_tuple(h) for h in got] == [p for p, _, _ in want]
        np.testing.assert_allclose([h.score for h in got], [s for _, s, _ in want], atol=1e-5)
        assert [h.frames.tolist() for h in got] == [f for _, _, f in want]


def test_prefix_beam_large_vocabulary_matches_wenet_statement():
    # Thousands of tokens: the frame's top-k is found through block maxima.
    rng = np.random.default_rng(21)
    lp = random_log_probs(rng, 2, 25, 2000, scale=1.0, blank_bias=4.0)
    hot = rng.integers(1, 2000, size=(2, 25))
    for b in range(2):
        lp[b, np.arange(25), hot[b]] += 5.0  # peaked rows, renormalised below
    lp = log_softmax(lp)
    out = ctc.prefix_beam(lp, np.array([25, 19]), 0, 8, 1.0, 8)
    for row, length in enumerate((25, 19)):
        want = wenet_prefix_beam(lp[row], length, 0, 8)
        assert [as_tuple(h) for h in out[row]] == [p for p, _, _ in want]
        np.testing.assert_allclose([h.score for h in out[row]], [s for _, s, _ in want],
                                   atol=1e-5)
        assert [h.frames.tolist() for h in out[row]] == [f for _, _, f in want]


def test_top_k_ties_go_to_the_lower_id():
    # One frame: each surviving prefix is one token, scored exactly its log-prob, and equal
    # scores keep the order the tokens were taken in.
    v = 500
    lp = np.full((1, 1, v), -20.0, dtype=np.float32)
    lp[0, 0, 0] = -0.5
    lp[0, 0, [7, 300, 450]] = [-1.0, -2.0, -3.0]
    tied = [460, 3, 499, 77, 200, 64, 65, 128, 5]
    lp[0, 0, tied] = -8.0
    hyps = ctc.prefix_beam(lp, np.array([1]), 0, 10, 1.0, 10)[0]
    assert [as_tuple(h) for h in hyps] == [(), (7,), (300,), (450,)] + [
        (u,) for u in sorted(tied)[:6]]
    assert [h.score for h in hyps] == [float(lp[0, 0, h.tokens[0]]) if len(h) else -0.5
                                       for h in hyps]


def test_prefix_beam_nonzero_blank_matches_wenet_statement():
    rng = np.random.default_rng(7)
    lp = random_log_probs(rng, 2, 30, 9, scale=2.0)
    out = ctc.prefix_beam(lp, np.array([30, 25]), 5, 5, 1.0, 5)
    for row, length in enumerate((30, 25)):
        want = wenet_prefix_beam(lp[row], length, 5, 5)
        assert [as_tuple(h) for h in out[row]] == [p for p, _, _ in want]
        assert [h.frames.tolist() for h in out[row]] == [f for _, _, f in want]


def test_beam_of_one_is_greedy():
    rng = np.random.default_rng(3)
    lp = random_log_probs(rng, 8, 60, 700, scale=2.0, blank_bias=6.0)
    lens = rng.integers(0, 61, size=8)
    beam = ctc.prefix_beam(lp, lens, 0, 1, 1.0, 1)
    greedy = ctc.greedy(lp, lens, 0)
    assert sum(len(g) for g in greedy) > 50
    for hs, g in zip(beam, greedy):
        (h,) = hs
        assert h.tokens.tolist() == g.tokens.tolist()
        assert h.frames.tolist() == g.frames.tolist()
        np.testing.assert_array_equal(h.probs, g.probs)
        assert h.score == pytest.approx(g.score, abs=1e-9)


def test_wider_beam_never_loses_the_best_score():
    # Not a theorem for a pruned search in general, but on a peaked row a wider beam must find
    # at least the prefix a narrow one keeps.
    rng = np.random.default_rng(5)
    lp = random_log_probs(rng, 1, 40, 16, scale=4.0, blank_bias=2.0)
    narrow = ctc.prefix_beam(lp, np.array([40]), 0, 2, 1.0, 1)[0][0]
    wide = ctc.prefix_beam(lp, np.array([40]), 0, 16, 1.0, 1)[0][0]
    assert wide.score >= narrow.score - 1e-9


# -- lengths, nbest, threads --------------------------------------------------------------------


def test_lengths_mask_the_padding():
    rng = np.random.default_rng(11)
    lp = random_log_probs(rng, 3, 30, 10, blank_bias=1.0)
    lens = np.array([30, 12, 0])
    padded = lp.copy()
    padded[1, 12:] = 0.0  # anything past the length must be invisible
    padded[1, 12:, 4] = 50.0
    padded[2] = np.nan
    for fn in (lambda x, n: ctc.prefix_beam(x, n, 0, 6, 1.0, 3),
               lambda x, n: [[h] for h in ctc.greedy(x, n, 0)]):
        batched = fn(padded, lens)
        for row in range(2):
            alone = fn(np.ascontiguousarray(lp[row:row + 1, :lens[row]]), lens[row:row + 1])
            assert [as_tuple(h) for h in batched[row]] == [as_tuple(h) for h in alone[0]]
            assert [h.score for h in batched[row]] == [h.score for h in alone[0]]
            assert [h.probs.tolist() for h in batched[row]] == [h.probs.tolist()
                                                                for h in alone[0]]
        (empty,) = batched[2]
        assert len(empty) == 0 and empty.score == 0.0


def test_nbest_is_ordered_distinct_and_a_prefix_of_the_wider_list():
    rng = np.random.default_rng(12)
    lp = random_log_probs(rng, 3, 40, 20, scale=1.5, blank_bias=1.0)
    lens = np.array([40, 40, 20])
    full = ctc.prefix_beam(lp, lens, 0, 8, 1.0, 8)
    top3 = ctc.prefix_beam(lp, lens, 0, 8, 1.0, 3)
    for f, t in zip(full, top3):
        assert len(f) == 8 and len(t) == 3
        scores = [h.score for h in f]
        assert scores == sorted(scores, reverse=True)
        assert len({as_tuple(h) for h in f}) == 8
        assert [as_tuple(h) for h in t] == [as_tuple(h) for h in f[:3]]
    # nbest beyond the beam returns the beam.
    assert len(ctc.prefix_beam(lp, lens, 0, 4, 1.0, 9)[0]) == 4


def test_threads_do_not_change_results():
    rng = np.random.default_rng(13)
    lp = random_log_probs(rng, 7, 50, 40, scale=2.0, blank_bias=1.0)
    lens = rng.integers(1, 51, size=7)
    one = ctc.prefix_beam(lp, lens, 0, 5, 1.0, 5, num_threads=1)
    many = ctc.prefix_beam(lp, lens, 0, 5, 1.0, 5, num_threads=3)
    for a, b in zip(one, many):
        assert [(as_tuple(h), h.score, h.frames.tolist()) for h in a] == \
            [(as_tuple(h), h.score, h.frames.tolist()) for h in b]
    g1, g3 = ctc.greedy(lp, lens, 0, num_threads=1), ctc.greedy(lp, lens, 0, num_threads=3)
    assert [as_tuple(h) for h in g1] == [as_tuple(h) for h in g3]


# -- prefix beam: a prefix that leaves the beam and comes back ---------------------------------


def reentries(trace: list[list[tuple[int, ...]]]) -> list[tuple[int, tuple[int, ...]]]:
    """(step, prefix) for each prefix that comes back into the beam after dropping out while one
    of its one-token extensions stayed in: the case where the returning prefix, extended again,
    reaches a token sequence that is already live."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for i, beam in enumerate(trace):
        before = set(trace[i - 1]) if i else set()
        for p in beam:
            if p in seen and p not in before and any(q[:-1] == p for q in before if q):
                out.append((i, p))
        seen.update(beam)
    return out


def test_a_prefix_that_returns_to_the_beam_is_merged_with_its_live_extension():
    # Beam 2, tokens {blank, 1, 2}. After frame 4 the beam is (2, 1) and (2, 1, 2, 1): (2, 1, 2)
    # has dropped out. Frame 5 brings (2, 1, 2) back from (2, 1) while (2, 1, 2, 1) stays, and
    # frame 6 extends it by 1 onto (2, 1, 2, 1) again: one prefix, its two sums added.
    probs = np.array([[0.03, 0.01, 0.96],
                      [0.31, 0.11, 0.58],
                      [0.18, 0.75, 0.07],
                      [0.23, 0.27, 0.50],
                      [0.39, 0.50, 0.11],
                      [0.18, 0.50, 0.32],
                      [0.39, 0.54, 0.07]])
    lp = np.log(probs).astype(np.float32)[None]
    trace: list[list[tuple[int, ...]]] = []
    want = wenet_prefix_beam(lp[0], 7, 0, 2, trace=trace)
    assert trace[4] == [(2, 1), (2, 1, 2, 1)] and (5, (2, 1, 2)) in reentries(trace)
    hyps = ctc.prefix_beam(lp, np.array([7]), 0, 2, 1.0, 2)[0]
    assert [as_tuple(h) for h in hyps] == [(2, 1, 2, 1), (2, 1, 2)] == [p for p, _, _ in want]
    np.testing.assert_allclose([h.score for h in hyps], [s for _, s, _ in want], atol=1e-6)
    assert [h.frames.tolist() for h in hyps] == [f for _, _, f in want]


@pytest.mark.parametrize("beam,v", [(3, 3), (4, 3), (5, 4)])
def test_prefixes_returning_to_the_beam_match_wenet_statement(beam, v):
    # Flat rows over a few tokens: prefixes often drop out and come back.
    rng = np.random.default_rng(40 + beam * v)
    b, t_len = 24, 30
    lp = random_log_probs(rng, b, t_len, v, scale=1.0)
    out = ctc.prefix_beam(lp, np.full(b, t_len), 0, beam, 1.0, beam)
    returned = 0
    for row in range(b):
        trace: list[list[tuple[int, ...]]] = []
        want = wenet_prefix_beam(lp[row], t_len, 0, beam, trace=trace)
        returned += bool(reentries(trace))
        got = [as_tuple(h) for h in out[row]]
        assert len(set(got)) == len(got)
        assert got == [p for p, _, _ in want]
        np.testing.assert_allclose([h.score for h in out[row]], [s for _, s, _ in want],
                                   atol=1e-5)
        assert [h.frames.tolist() for h in out[row]] == [f for _, _, f in want]
    assert returned >= b // 3  # the inputs do provoke the case


# -- blank skipping -----------------------------------------------------------------------------


def test_threshold_of_one_never_skips():
    rng = np.random.default_rng(14)
    lp = random_log_probs(rng, 2, 30, 8, blank_bias=6.0)  # blank often above 0.99
    lens = np.array([30, 30])
    on = ctc.prefix_beam(lp, lens, 0, 4, 1.0, 4)
    want = [wenet_prefix_beam(lp[r], 30, 0, 4) for r in range(2)]
    for got, w in zip(on, want):
        np.testing.assert_allclose([h.score for h in got], [s for _, s, _ in w], atol=1e-5)


def path_log_probs(rng: np.random.Generator, b: int, t: int, v: int) -> np.ndarray:
    """Peaked rows along random label paths that often repeat a token across one blank frame
    (the case blank skipping must replay), blank frames at p ~ 0.9-0.999."""
    logits = rng.standard_normal((b, t, v))
    for row in range(b):
        u = int(rng.integers(1, v))
        for f in range(t):
            r = rng.random()
            if r < 0.45:
                logits[row, f, 0] += rng.uniform(5.0, 10.0)
                continue
            if r > 0.8:
                u = int(rng.integers(1, v))
            logits[row, f, u] += rng.uniform(2.0, 6.0)
    return log_softmax(logits)


def count_replays(lp: np.ndarray, length: int, threshold: float) -> int:
    n, prev_skipped, last_best = 0, False, -1
    for t in range(length):
        if math.exp(float(lp[t, 0])) > threshold:
            prev_skipped = True
            continue
        best = int(lp[t].argmax())
        n += prev_skipped and best != 0 and best == last_best
        last_best, prev_skipped = best, False
    return n


@pytest.mark.parametrize("threshold", [0.9, 0.97])
def test_blank_skip_matches_statement_and_drops_skipped_frames(threshold):
    rng = np.random.default_rng(15)
    lp = path_log_probs(rng, 3, 80, 8)
    lens = np.array([80, 71, 50])
    out = ctc.prefix_beam(lp, lens, 0, 6, threshold, 6)
    assert sum(count_replays(lp[r], lens[r], threshold) for r in range(3)) > 0
    for row in range(3):
        want = wenet_prefix_beam(lp[row], lens[row], 0, 6, skip=threshold)
        got = out[row]
        assert [as_tuple(h) for h in got] == [p for p, _, _ in want]
        np.testing.assert_allclose([h.score for h in got], [s for _, s, _ in want], atol=1e-5)
        assert [h.frames.tolist() for h in got] == [f for _, _, f in want]
        skipped = np.exp(lp[row, :lens[row], 0]) > threshold
        assert skipped.any()
        # No token is emitted at a skipped frame unless it was replayed between two repeats.
        for h in got:
            for f in h.frames.tolist():
                assert not skipped[f] or (f + 1 < lens[row] and not skipped[f + 1])


def test_blank_skip_keeps_a_blank_separated_repeat():
    # Frames: a, blank (p=0.995), a. Skipping the middle frame must not merge the two a's.
    lp = np.full((1, 3, 3), math.log(0.0025), dtype=np.float32)
    lp[0, 0, 1] = lp[0, 2, 1] = math.log(0.995)
    lp[0, 1, 0] = math.log(0.995)
    (h,) = ctc.prefix_beam(lp, np.array([3]), 0, 3, 0.98, 1)[0]
    assert h.tokens.tolist() == [1, 1]
    assert h.frames.tolist() == [0, 2]


def _replay_free_row(threshold: float) -> np.ndarray:
    """A (T, V) row where skipping never replays a frame: no kept frame follows a skip with
    the previous kept frame's non-blank argmax."""
    for seed in range(100):
        lp = random_log_probs(np.random.default_rng(seed), 1, 50, 10, scale=3.0,
                              blank_bias=3.0)[0]
        kept = np.flatnonzero(np.exp(lp[:, 0]) <= threshold)
        best = lp.argmax(-1)
        if len(kept) < 50 - 5 and not any(
                kept[i] - kept[i - 1] > 1 and best[kept[i]] != 0
                and best[kept[i]] == best[kept[i - 1]] for i in range(1, len(kept))):
            return lp
    raise AssertionError("no replay-free row among the seeds")


def test_blank_skip_without_repeats_equals_deleting_the_frames():
    lp = _replay_free_row(0.95)
    keep = np.exp(lp[:, 0]) <= 0.95
    kept = np.flatnonzero(keep)
    skipped = ctc.prefix_beam(lp[None], np.array([50]), 0, 5, 0.95, 5)[0]
    dense = ctc.prefix_beam(np.ascontiguousarray(lp[keep][None]), np.array([keep.sum()]), 0, 5,
                            1.0, 5)[0]
    assert [as_tuple(h) for h in skipped] == [as_tuple(h) for h in dense]
    assert [h.score for h in skipped] == pytest.approx([h.score for h in dense], abs=1e-9)
    assert [h.frames.tolist() for h in skipped] == [kept[h.frames].tolist() for h in dense]


# -- argument checks ----------------------------------------------------------------------------


def test_bad_arguments_are_refused():
    lp = np.zeros((2, 5, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="blank"):
        ctc.greedy(lp, np.array([5, 5]), 4)
    with pytest.raises(ValueError, match="lengths"):
        ctc.prefix_beam(lp, np.array([6, 5]), 0, 2, 1.0, 1)
    with pytest.raises(ValueError, match="lengths"):
        ctc.prefix_beam(lp, np.array([5]), 0, 2, 1.0, 1)
    with pytest.raises(ValueError, match="B, T, V"):
        ctc.greedy(lp[0], np.array([5]), 0)
    with pytest.raises(ValueError, match="beam_size"):
        ctc.prefix_beam(lp, np.array([5, 5]), 0, 0, 1.0, 1)
