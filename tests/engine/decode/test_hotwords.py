"""Hotword boosting: the context graph against icefall's published scores, and the CTC prefix
beam and transducer modified beam search on crafted posteriors where the plain search misses
a hotword that boosting finds (and a half-typed one that boosting must not keep)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from oasr.engine.decode.ctc import CtcDecodeStrategy, CtcOptions, ctc_search
from oasr.engine.decode.ctc_streaming import CtcPrefixBeamStream
from oasr.engine.decode.hotwords import ContextGraph, build_context, hotword_phrases
from oasr.engine.decode.transducer_search import modified_beam_search
from oasr.engine.request import DecodingOptions, Request

# Token ids of the crafted vocabularies: 0 is the blank.
IDS = {"a": 1, "b": 2, "c": 3, "d": 4}


class Letters:
    """Encodes letters a-d (anything else is <unk>, id 5)."""

    unk_id = 5
    vocab_size = 6

    def encode(self, text: str) -> list[int]:
        return [IDS.get(ch, self.unk_id) for ch in text if not ch.isspace()]

    def decode(self, ids) -> str:
        names = {v: k for k, v in IDS.items()}
        return "".join(names.get(int(i), "?") for i in ids)


# -- the graph ----------------------------------------------------------------------------------


def test_graph_totals_are_icefalls():
    """icefall's context_graph.py self-test: phrases, queries and their expected totals."""
    phrases = ["S", "HE", "SHE", "SHELL", "HIS", "HERS", "HELLO", "THIS", "THEM"]
    queries = {"HEHERSHE": 14, "HERSHE": 12, "HISHE": 9, "SHED": 6, "HELL": 2, "HELLO": 7,
               "DHRHISQ": 4, "THEN": 2}
    for order in (phrases, list(reversed(phrases))):  # a prefix inserted after its extension
        graph = ContextGraph([[ord(c) for c in p] for p in order], 1.0)
        for query, expected in queries.items():
            state, total = 0, 0.0
            for c in query:
                bonus, state = graph.step(state, ord(c))
                total += bonus
            assert total + graph.finish(state) == expected, (order[0], query)


def test_phrases_and_refusals():
    assert hotword_phrases("ab, cd\nd ,, ") == ["ab", "cd", "d"]
    assert hotword_phrases(("ab", " ")) == ["ab"]
    assert build_context(Letters(), None, 1.5) is None
    assert build_context(Letters(), " , ", 1.5) is None
    with pytest.raises(ValueError, match="'abx'.*cannot spell"):
        build_context(Letters(), "ab, abx", 1.5)
    with pytest.raises(ValueError, match="tokenizer"):
        build_context(None, "ab", 1.5)


# -- CTC prefix beam ----------------------------------------------------------------------------


def _log(rows: list[list[float]]) -> np.ndarray:
    p = np.asarray(rows, dtype=np.float64)
    return np.log(p / p.sum(-1, keepdims=True)).astype(np.float32)


# "a" then "b" (0.50) narrowly over "c" (0.44), then silence.
AB_OVER_AC = _log([[0.05, 0.90, 0.03, 0.02, 0.0001], [0.05, 0.01, 0.50, 0.44, 0.0001],
                   [0.97, 0.01, 0.01, 0.01, 0.0001]])


def _ids(hyp) -> list[int]:
    return list(hyp.tokens)


def test_ctc_boosting_finds_the_hotword_the_plain_beam_misses():
    plain = CtcPrefixBeamStream(4, 0)
    plain.feed(AB_OVER_AC)
    assert _ids(plain.best()) == [1, 2]
    boosted = CtcPrefixBeamStream(4, 0, build_context(Letters(), "ac", 1.5))
    boosted.feed(AB_OVER_AC)
    best = boosted.best()
    assert _ids(best) == [1, 3]
    # Its score is the acoustic prefix probability plus the two tokens' bonus.
    acoustic = {tuple(h.tokens): h.score for h in plain.nbest(4)}
    assert best.score == pytest.approx(acoustic[(1, 3)] + 3.0, abs=1e-6)
    # A phrase only half typed ("acd": "ac" then no "d") earns nothing in the end.
    half = CtcPrefixBeamStream(4, 0, build_context(Letters(), "acd", 1.5))
    half.feed(AB_OVER_AC)
    assert _ids(half.best()) == [1, 2]


def test_ctc_without_hotwords_is_the_native_search():
    gen = np.random.default_rng(3)
    for _ in range(4):
        logits = gen.normal(size=(30, 5)) * 3
        lp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
        want = ctc_search(lp[None], np.array([30]), 0, 4, 1.0, 4)[0]
        s = CtcPrefixBeamStream(4, 0, None)
        s.feed(lp)
        got = s.nbest(4)
        assert [h.tokens for h in got] == [list(h.tokens) for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)


def _ctc_family(**options) -> CtcDecodeStrategy:
    model = SimpleNamespace(config=SimpleNamespace(blank_id=0))
    return CtcDecodeStrategy(model, CtcOptions(**options), tokenizer=Letters())


def test_ctc_family_boosts_only_the_rows_asking():
    s = _ctc_family(beam_size=4)
    lp = torch.from_numpy(np.stack([AB_OVER_AC] * 3))
    reqs = [Request(str(i), np.zeros(16, np.float32), DecodingOptions(hotwords=h))
            for i, h in enumerate([None, "ac", "dd, ac"])]
    for r in reqs:
        s.validate_options(r.decoding)
    outs = s.decode_offline(lp, torch.tensor([3, 3, 3]), reqs)
    assert [o.token_ids for o in outs] == [[1, 2], [1, 3], [1, 3]]
    assert [o.text for o in outs] == ["ab", "ac", "ac"]


def test_ctc_family_admission():
    with pytest.raises(ValueError, match="beam_size=10"):
        _ctc_family(beam_size=1).validate_options(DecodingOptions(hotwords="ab"))
    with pytest.raises(ValueError, match="blank_skip_threshold=1.0"):
        _ctc_family(blank_skip_threshold=0.9).validate_options(DecodingOptions(hotwords="ab"))
    with pytest.raises(ValueError, match="sets none"):
        _ctc_family().validate_options(DecodingOptions(hotwords_score=2.0))
    with pytest.raises(ValueError, match="cannot spell"):
        _ctc_family().validate_options(DecodingOptions(hotwords="x"))
    _ctc_family(beam_size=1).validate_options(DecodingOptions())  # no hotwords: greedy is fine


def test_rescoring_family_refuses_hotwords():
    from oasr.engine.decode.ctc_aed_rescoring import CtcAedRescoringStrategy

    model = SimpleNamespace(config=SimpleNamespace(blank_id=0))
    s = CtcAedRescoringStrategy(model, None, tokenizer=Letters())
    with pytest.raises(ValueError, match="cannot act on 'hotwords'"):
        s.validate_options(DecodingOptions(hotwords="ab"))


# -- transducer modified beam search -------------------------------------------------------


class FramePredictor:
    """A label-window predictor that predicts nothing: the joint is the frame's logits."""

    blank_id = 0
    label_window = 1

    def init_state(self, batch: int, device: torch.device) -> torch.Tensor:
        return torch.zeros(batch, 1, dtype=torch.int64, device=device)

    def predict(self, window: torch.Tensor) -> torch.Tensor:
        return torch.zeros(window.shape[0], 1)


class FrameJoiner:
    def project_encoder(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        return dec

    def __call__(self, enc: torch.Tensor, dec: torch.Tensor) -> torch.Tensor:
        return enc + dec


def _frames(rows: list[list[float]]) -> torch.Tensor:
    return torch.from_numpy(_log(rows))


# "a", then "b" (0.50) narrowly over "c" (0.44), then blanks.
TRANSDUCER = _frames([[0.08, 0.90, 0.01, 0.01, 0.0001], [0.05, 0.01, 0.50, 0.44, 0.0001],
                      [0.97, 0.01, 0.01, 0.01, 0.0001], [0.97, 0.01, 0.01, 0.01, 0.0001]])


def test_transducer_boosting_finds_the_hotword_the_plain_beam_misses():
    hidden = torch.stack([TRANSDUCER] * 3)
    lens = torch.tensor([4, 4, 4])
    search = (FramePredictor(), FrameJoiner())
    plain = modified_beam_search(*search, hidden, lens, beam=4, n_best=4)
    assert all(r[0].tokens == [1, 2] for r in plain)
    ac, half = build_context(Letters(), "ac", 1.5), build_context(Letters(), "acd", 1.5)
    boosted = modified_beam_search(*search, hidden, lens, beam=4, n_best=4,
                                   contexts=[None, ac, half])
    assert [r[0].tokens for r in boosted] == [[1, 2], [1, 3], [1, 2]]
    # No hotwords: the same search, hypothesis for hypothesis.
    assert [[(h.tokens, h.score) for h in r] for r in boosted[:1]] == \
        [[(h.tokens, h.score) for h in r] for r in plain[:1]]
    # The boosted score is the acoustic log-probability plus the phrase's bonus.
    acoustic = {tuple(h.tokens): h.score for h in plain[1]}
    assert boosted[1][0].score == pytest.approx(acoustic[(1, 3)] + 3.0, abs=1e-5)
    assert math.isfinite(boosted[2][0].score)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@gpu
def test_on_cuda_hotword_rows_take_the_counted_host_search_and_the_rest_the_kernel():
    from oasr.ops.counting import counts_since, snapshot

    s = _ctc_family(beam_size=4)
    lp = torch.from_numpy(np.stack([AB_OVER_AC] * 2))
    reqs = [Request(str(i), np.zeros(16, np.float32), DecodingOptions(hotwords=h))
            for i, h in enumerate([None, "ac"])]
    base = snapshot()
    outs = s.decode_offline(lp.cuda(), torch.tensor([3, 3]).cuda(), reqs)
    assert [o.token_ids for o in outs] == [[1, 2], [1, 3]]
    assert counts_since(base).get(("gap", "ctc-hotwords")) == 1


@pytest.mark.gpu
@gpu
def test_transducer_boosting_on_cuda_matches_the_cpu():
    hidden = torch.stack([TRANSDUCER] * 2)
    lens = torch.tensor([4, 4])
    contexts = [None, build_context(Letters(), "ac", 1.5)]

    class CudaPredictor(FramePredictor):
        def predict(self, window):
            return torch.zeros(window.shape[0], 1, device=window.device)

    search = (CudaPredictor(), FrameJoiner())
    cpu = modified_beam_search(*search, hidden, lens, beam=4, contexts=contexts)
    cuda = modified_beam_search(*search, hidden.cuda(), lens.cuda(), beam=4, contexts=contexts)
    assert [r[0].tokens for r in cuda] == [r[0].tokens for r in cpu] == [[1, 2], [1, 3]]
