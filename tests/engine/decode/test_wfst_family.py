"""The ``ctc_wfst`` decode family on the fake CTC model: options, admission, outputs (the
graph's words as text, tokens, confidence, word timings), hot words, the engine path and the
streaming session.

Oracles: the CPU search is tested against kaldi-decoder in tests/graphs/test_search.py, so here
the family must hand its best path through unchanged; posteriors, spans and segmentations are
recomputed by hand; the streaming session must give the offline result.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode import build_decode_strategy
from oasr.engine.decode.ctc_wfst import CtcWfstOptions
from oasr.engine.decode.ctc_wfst_streaming import CtcWfstStreamingSession
from oasr.engine.decode.options import resolve_options
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.graphs.arpa import estimate
from oasr.graphs.compile import build_tlg
from oasr.graphs.lexicon import Lexicon
from oasr.graphs.search import SearchOptions, decode_rows, read_tokens
from oasr.graphs.store import GraphError, GraphInfo, load_graph, save_graph
from tests.helpers.fake_ctc import PIECES, SECONDS_PER_FRAME, VOCAB, build_fake_ctc, speechy_audio
from tests.helpers.tiny_whisper import torch_threads

pytest.importorskip("kaldifst")

UNIT = {p: i for i, p in enumerate(PIECES) if len(p) == 1 and p != " "}
WORDS = ["bad", "cab", "bead", "dice", "hid", "fee", "jab", "ace", "bee", "ice"]
TEXT = ["bad cab hid", "fee bead ace", "cab bad fee", "hid jab dice", "bee ice bad",
        "ace bead cab", "dice hid fee jab", "bad bad cab"]


def spell(word):
    return tuple(UNIT[c] for c in word)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def graph_path(tmp_path_factory):
    lm = estimate([t.split() for t in TEXT], 2)
    parts = build_tlg(VOCAB, 0, Lexicon([(w, spell(w)) for w in WORDS]), lm)
    info = GraphInfo(token_rule="entered", num_units=VOCAB, blank=0, build=parts.report)
    return save_graph(tmp_path_factory.mktemp("g"), "fake", parts.fst, parts.words, info,
                      parts.lexicon.entries)


def strategy(graph_path, **options):
    loaded = build_fake_ctc(0)
    s = build_decode_strategy("ctc_wfst", loaded.model, {"graph": str(graph_path), **options},
                              tokenizer=loaded.tokenizer)
    s.feature_config = loaded.feature_config
    return s


def requests(n, **decoding):
    return [Request(str(i), np.zeros(160, np.float32), DecodingOptions(**decoding))
            for i in range(n)]


def peaked(words, p=0.9):
    """(1, T, V) log-probs peaked on the words' units: each unit two frames, a blank after each
    word and between repeated units."""
    path = []
    for w in words:
        prev = None
        for u in spell(w):
            if u == prev:
                path.append(0)
            path += [u, u]
            prev = u
        path.append(0)
    lp = np.full((1, len(path), VOCAB), math.log((1 - p) / (VOCAB - 1)), np.float32)
    lp[0, np.arange(len(path)), path] = math.log(p)
    return torch.from_numpy(lp), path


def random_lp(seed, b=3, t=40):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, t, VOCAB)) * 2.5
    x[..., 0] += 1.0
    x -= np.log(np.exp(x).sum(-1, keepdims=True))
    return torch.from_numpy(x.astype(np.float32)), torch.tensor([t, t - 9, t // 2][:b])


# -- options and admission ----------------------------------------------------------------------


def test_options_defaults_strings_and_validation():
    opts = resolve_options(CtcWfstOptions, {"graph": "g.fst"})
    assert (opts.beam, opts.max_active, opts.min_active, opts.acoustic_scale) == (
        16.0, 7000, 200, 1.0)
    opts = resolve_options(CtcWfstOptions, {"graph": "g", "beam": "12.5", "max_active": "900",
                                            "hotwords_score": "2"})
    assert (opts.beam, opts.max_active, opts.hotwords_score) == (12.5, 900, 2.0)
    for bad in ({}, {"graph": "g", "beam": 0}, {"graph": "g", "max_active": 1},
                {"graph": "g", "min_active": 10, "max_active": 10},
                {"graph": "g", "blank_skip_threshold": 0.0}, {"graph": "g", "acoustic_scale": 0},
                {"graph": "g", "hotwords_score": -1}):
        with pytest.raises(ValueError):
            resolve_options(CtcWfstOptions, bad)
    with pytest.raises(KeyError, match="lattice_beam"):
        resolve_options(CtcWfstOptions, {"graph": "g", "lattice_beam": 8})


def test_admission(graph_path, tmp_path):
    s = strategy(graph_path)
    s.validate_options(DecodingOptions(word_timestamps=True))
    with pytest.raises(ValueError, match="one best"):
        s.validate_options(DecodingOptions(n_best=2))
    with pytest.raises(ValueError, match="temperature"):
        s.validate_options(DecodingOptions(temperature=0.5))
    # A graph without its lexicon decodes but cannot time words.
    bare = tmp_path / "bare.fst"
    shutil.copy(graph_path, bare)
    shutil.copy(graph_path.with_name("fake.words.txt"), tmp_path / "bare.words.txt")
    s = strategy(bare)
    assert s.word_timing_modes == ()
    with pytest.raises(ValueError, match="no lexicon beside it"):
        s.validate_options(DecodingOptions(word_timestamps=True))


def test_a_graph_for_other_units_or_blank_is_refused(graph_path, tmp_path):
    from tests.graphs.helpers import build_graph, small_lm

    other = build_graph(tmp_path, "chars", small_lm(limit=3))  # 28 units
    with pytest.raises(GraphError, match="built for another model"):
        strategy(other)
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in graph_path.parent.glob("fake.*"):
        shutil.copy(f, moved / f.name)
    meta = json.loads((moved / "fake.json").read_text())
    (moved / "fake.json").write_text(json.dumps({**meta, "blank": 3}))
    with pytest.raises(GraphError, match="blank 3"):
        strategy(moved / "fake.fst")
    with pytest.raises(GraphError, match="not a bundle folder"):
        strategy("fake")


# -- outputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("opts", [{}, {"beam": 8.0, "max_active": 30, "min_active": 4},
                                  {"acoustic_scale": 0.6, "blank_penalty": 0.5}])
def test_outputs_are_the_searchs_best_path(graph_path, opts):
    s = strategy(graph_path, **opts)
    lp, lens = random_lp(1)
    outs = s.decode_offline(lp, lens, requests(3))
    graph = load_graph(graph_path)
    paths = decode_rows(graph.graph.native(), lp.numpy(), lens.numpy(), s.search_options)
    for o, p, n in zip(outs, paths, lens.tolist()):
        tokens, frames = read_tokens(p, 0, "entered")
        assert o.text == " ".join(graph.word_text(p.words))
        assert o.token_ids == tokens.tolist()
        x = lp[int(o.request_id)].numpy()
        probs = [max(x[f, t], x[min(f + 1, n - 1), t]) for t, f in zip(tokens, frames)]
        assert o.confidence == pytest.approx(float(np.mean(np.exp(probs))) if probs else None)


def test_peaked_posteriors_give_their_words_and_timings(graph_path):
    s = strategy(graph_path)
    lp, path = peaked(["dice", "bad", "fee"])
    reqs = requests(1, word_timestamps=True)
    (out,) = s.decode_offline(lp, torch.tensor([len(path)]), reqs)
    assert out.text == "dice bad fee"
    assert out.token_ids == [*spell("dice"), *spell("bad"), *spell("fee")]
    spf = SECONDS_PER_FRAME
    # each unit's first frame; a word runs to the next word's first unit (the last to the end)
    firsts = [t for t, u in enumerate(path) if u and (t == 0 or path[t - 1] != u)]
    assert out.timestamps == pytest.approx([f * spf for f in firsts])
    assert [(w.word, w.start, w.end) for w in out.words] == [
        ("dice", pytest.approx(firsts[0] * spf), pytest.approx(firsts[4] * spf)),
        ("bad", pytest.approx(firsts[4] * spf), pytest.approx(firsts[7] * spf)),
        ("fee", pytest.approx(firsts[7] * spf), pytest.approx(len(path) * spf))]
    assert [w.confidence for w in out.words] == pytest.approx([0.9, 0.9, 0.9])


def test_hotwords_change_the_result(graph_path):
    """'bad' against 'bead': an 'e' too weak to win alone; the hot word tips it."""
    lp, path = peaked(["cab", "bad"])
    e = UNIT["e"]
    x = lp.clone()
    t = path.index(UNIT["b"], 6)  # bad's b
    x[0, t + 2] = x[0, t + 1]
    x[0, t + 2, e] = math.log(0.3)
    x[0, t + 2, UNIT["b"]] = math.log(0.6)
    x = x.log_softmax(-1)
    n = torch.tensor([x.shape[1]])
    s = strategy(graph_path, hotwords_score=3.0)
    assert s.decode_offline(x, n, requests(1))[0].text == "cab bad"
    assert s.decode_offline(x, n, requests(1, hotwords="bead"))[0].text == "cab bead"
    # a request's score overrides the family's: too small a bonus leaves 'bad'
    weak = requests(1, hotwords=("bead",), hotwords_score=0.01)
    assert s.decode_offline(x, n, weak)[0].text == "cab bad"
    # rows of one batch carry their own hot words
    x2, n2 = torch.cat([x, x]), torch.cat([n, n])
    mixed = [*requests(1), *requests(1, hotwords="bead")]
    assert [o.text for o in s.decode_offline(x2, n2, mixed)] == ["cab bad", "cab bead"]
    with pytest.raises(GraphError, match="'zebra'"):
        s.validate_options(DecodingOptions(hotwords="zebra"))
    with pytest.raises(ValueError, match="sets none"):
        s.validate_options(DecodingOptions(hotwords_score=2.0))


# -- the engine and streaming -------------------------------------------------------------------


def test_engine_decodes_the_fused_forward(graph_path):
    loaded = build_fake_ctc(1)
    audio = [speechy_audio(i) for i in range(4)]
    engine = ASREngine(EngineConfig(device="cpu", decode_method="ctc_wfst", max_batch_size=4,
                                    decode_options={"graph": str(graph_path), "beam": 12.0}),
                       loaded=loaded)
    outs = {o.request_id: o for o in engine.run(
        [Request(str(i), a) for i, a in enumerate(audio)])}
    graph = load_graph(graph_path)
    for i, a in enumerate(audio):
        feats, lens = engine.inputs([Request("x", a)])
        lp, out_lens = loaded.model.forward_offline(feats, lens)
        (p,) = decode_rows(graph.graph.native(), lp.detach().numpy(), out_lens.numpy(),
                           SearchOptions(beam=12.0, max_active=7000, min_active=200))
        assert outs[str(i)].error is None
        assert outs[str(i)].text == " ".join(graph.word_text(p.words))
        assert outs[str(i)].token_ids == read_tokens(p, 0, "entered")[0].tolist()


def test_streaming_session_equals_offline(graph_path):
    s = strategy(graph_path, beam=10.0, max_active=50, min_active=5)
    assert s.streaming_session is CtcWfstStreamingSession
    session = CtcWfstStreamingSession(s)
    model = s.model
    rng = np.random.default_rng(0)
    hidden = torch.from_numpy(rng.standard_normal((2, 37, 16)).astype(np.float32))
    lens = torch.tensor([37, 23])
    offline = s.decode_offline(model.ctc_log_probs(hidden), lens, requests(2))
    searches = [session.new_search(), session.new_search()]
    for a, b in [(0, 5), (5, 6), (6, 20), (20, 37)]:
        chunk_lens = torch.clamp(lens - a, 0, b - a)
        session.feed(searches, hidden[:, a:b], chunk_lens, [None, None])
    for search, o in zip(searches, offline):
        hyp = search.best()
        assert hyp.tokens == o.token_ids
        assert " ".join(hyp.words) == o.text
        assert search.stable_prefix() == 0
    searches[0].reset()
    assert searches[0].best().tokens == []
