"""The CPU search (oasr._C.wfst) against kaldi-decoder's FasterDecoder (Kaldi's own decoder) on
the same graph and posteriors: per-frame labels, words and costs, including where max_active and
min_active bind (the search walks tokens in Kaldi's hash-list order, so its running cutoffs are
Kaldi's)."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.graphs.search import SearchOptions, WfstPath, decode_rows, read_tokens, segment_words
from oasr.graphs.store import load_graph
from oasr.native import native
from tests.graphs.helpers import build_graph, kaldi_best, random_log_probs, small_lm

pytest.importorskip("kaldi_decoder")


@pytest.fixture(scope="module")
def graph_path(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("g"), "tg", small_lm(limit=20))


@pytest.fixture(scope="module")
def graph(graph_path):
    return load_graph(graph_path)


CASES = [  # (beam, max_active, min_active): beam only, max_active binding, min_active binding
    (10.0, 2**31 - 1, 0),
    (12.0, 40, 5),
    (6.0, 2**31 - 1, 300),
    (16.0, 7000, 200),
]


@pytest.mark.parametrize("beam,max_active,min_active", CASES)
def test_best_path_equals_kaldi_decoder(graph, graph_path, beam, max_active, min_active):
    lp = random_log_probs(seed=int(beam * 7 + max_active % 97), batch=5, frames=70)
    lens = np.array([70, 61, 33, 9, 1])
    opts = SearchOptions(beam=beam, max_active=max_active, min_active=min_active)
    paths = decode_rows(graph.graph.native(), lp, lens, opts, num_threads=2)
    for b, path in enumerate(paths):
        ref = kaldi_best(graph_path, lp[b, :lens[b]], beam=beam, max_active=max_active,
                         min_active=min_active)
        assert path.labels.tolist() == ref.labels
        assert path.frames.tolist() == list(range(lens[b]))
        assert path.words.tolist() == ref.words
        assert path.reached_final == ref.reached_final
        assert path.cost == pytest.approx(ref.cost, rel=1e-5, abs=1e-3)


def test_peaked_posteriors_spell_the_words(graph, graph_path):
    """Posteriors peaked on a sentence's letters (blanks between words and between repeated
    letters) decode to that sentence, as Kaldi's decoder decodes them."""
    from tests.graphs.helpers import UNITS, sentences, spell

    words = sentences(20)[3][:6]
    frames = []
    for w in words:
        prev = None
        for u in spell(w):
            if u == prev:
                frames.append(0)
            frames += [u, u]
            prev = u
        frames.append(0)
    lp = np.full((1, len(frames), len(UNITS)), np.log(0.02 / (len(UNITS) - 1)), np.float32)
    lp[0, np.arange(len(frames)), frames] = np.log(0.98)
    path = decode_rows(graph.graph.native(), lp, np.array([len(frames)]), SearchOptions())[0]
    assert graph.word_text(path.words) == words
    ref = kaldi_best(graph_path, lp[0], beam=16.0, max_active=2**31 - 1, min_active=20)
    assert path.words.tolist() == ref.words
    tokens, token_frames = read_tokens(path, 0, "entered")
    assert tokens.tolist() == [u for w in words for u in spell(w)]
    starts = segment_words(tokens.tolist(), words, graph.spellings)
    assert starts is not None and len(starts) == len(words)
    assert token_frames[0] == 0


def test_acoustic_scale_and_blank_penalty_transform_the_log_probs(graph, graph_path):
    lp = random_log_probs(seed=3, batch=2, frames=40)
    scale, penalty = np.float32(0.7), np.float32(1.25)
    opts = SearchOptions(beam=12.0, acoustic_scale=float(scale), blank_penalty=float(penalty))
    paths = decode_rows(graph.graph.native(), lp, np.array([40, 25]), opts)
    for b, n in enumerate((40, 25)):
        x = lp[b, :n].copy()
        x[:, 0] -= penalty
        x *= scale
        ref = kaldi_best(graph_path, x, beam=12.0, max_active=2**31 - 1, min_active=20)
        assert paths[b].labels.tolist() == ref.labels
        assert paths[b].words.tolist() == ref.words


def test_blank_skipping_decodes_the_kept_frames(graph, graph_path):
    """Skipped frames are left out of the search; the result equals Kaldi's decoder on the
    frames the rule keeps (the ctc family's rule: a skipped frame between two equal argmaxes is
    replayed)."""
    rng = np.random.default_rng(5)
    lp = random_log_probs(seed=9, batch=1, frames=80, sharpness=4.0)[0]
    blanky = rng.random(80) < 0.5
    lp[blanky] = np.log(0.005 / (lp.shape[1] - 1))
    lp[blanky, 0] = np.log(0.995)
    thr = 0.99
    kept, prev_skipped, last_best, last_skip = [], False, -1, -1
    for t in range(80):
        if np.exp(float(lp[t, 0])) > thr:
            prev_skipped, last_skip = True, t
            continue
        best = int(np.argmax(lp[t]))
        if prev_skipped and best != 0 and best == last_best:
            kept.append(last_skip)
        kept.append(t)
        last_best, prev_skipped = best, False
    assert len(kept) < 60
    opts = SearchOptions(beam=12.0, blank_skip_threshold=thr)
    path = decode_rows(graph.graph.native(), lp[None], np.array([80]), opts)[0]
    ref = kaldi_best(graph_path, lp[kept], beam=12.0, max_active=2**31 - 1, min_active=20)
    assert path.frames.tolist() == kept
    assert path.labels.tolist() == ref.labels
    assert path.words.tolist() == ref.words


def test_chunked_decoding_equals_one_pass(graph):
    lp = random_log_probs(seed=11, batch=1, frames=90)[0]
    opts = SearchOptions(beam=10.0, max_active=60, min_active=10)
    whole = decode_rows(graph.graph.native(), lp[None], np.array([90]), opts)[0]
    dec = native("wfst").Decoder(graph.graph.native(), opts.native())
    for a, b in [(0, 7), (7, 7), (7, 40), (40, 41), (41, 90)]:
        dec.advance(lp[a:b])
    chunked = WfstPath.from_native(dec.best_path(True))
    assert chunked.labels.tolist() == whole.labels.tolist()
    assert chunked.words.tolist() == whole.words.tolist()
    assert chunked.cost == whole.cost
    dec.reset()
    dec.advance(lp[:30])
    assert dec.frames_decoded == 30


def test_long_input_survives_traceback_compaction(graph):
    """Thousands of frames: the traceback arena is compacted many times over; the result must
    not depend on it (a chunked run compacts at other points)."""
    lp = random_log_probs(seed=2, batch=1, frames=3000, sharpness=1.0)[0]
    opts = SearchOptions(beam=14.0, max_active=400, min_active=50)
    whole = decode_rows(graph.graph.native(), lp[None], np.array([3000]), opts)[0]
    dec = native("wfst").Decoder(graph.graph.native(), opts.native())
    for a in range(0, 3000, 333):
        dec.advance(lp[a:a + 333])
    chunked = WfstPath.from_native(dec.best_path(True))
    assert len(whole.labels) == 3000
    assert chunked.labels.tolist() == whole.labels.tolist()
    assert chunked.words.tolist() == whole.words.tolist()


def test_units_past_the_log_probs_are_refused(graph):
    lp = random_log_probs(seed=1, batch=1, frames=5, vocab=10)
    with pytest.raises(ValueError, match="built for another unit set"):
        decode_rows(graph.graph.native(), lp, np.array([5]), SearchOptions())


def test_token_rules():
    path = WfstPath(True, True, 0.0, np.array([0, 3, 3, 0, 3, 4, 4, 4], np.int32),
                    np.arange(8, dtype=np.int32), np.array([0, 1, 0, 0, 1, 1, 1, 0], np.uint8),
                    np.zeros(0, np.int32), np.zeros(0, np.int32))
    tokens, frames = read_tokens(path, 0, "entered")
    assert tokens.tolist() == [3, 3, 4, 4] and frames.tolist() == [1, 4, 5, 6]
    tokens, frames = read_tokens(path, 0, "collapse")
    assert tokens.tolist() == [3, 3, 4] and frames.tolist() == [1, 4, 5]
    with pytest.raises(ValueError, match="unknown token rule"):
        read_tokens(path, 0, "other")


def test_segment_words_takes_the_spelling_that_fits():
    spellings = {"a": [(1,), (1, 2)], "b": [(2, 3)], "c": [(3,)]}
    assert segment_words([1, 2, 3], ["a", "b"], spellings) == [0, 1]
    assert segment_words([1, 2, 3], ["a", "c"], spellings) == [0, 2]
    assert segment_words([1, 2, 3], ["c"], spellings) is None
    assert segment_words([], [], spellings) == []
