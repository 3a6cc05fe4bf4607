"""The ``ctc_aed_rescoring`` family: CTC n-best, one batched attention pass, WeNet's fusion.

Oracle for the fusion: each hypothesis' attention score recomputed here from the fake model's
bigram tables (not through ``attention_scores``), plus the CTC prefix scores from the decoder,
then ``att + ctc_weight * ctc`` maximised by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode import build_decode_strategy
from oasr.engine.decode.ctc_aed_rescoring import CtcAedRescoringOptions
from oasr.engine.decode.options import resolve_options
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.models.interfaces import MissingCapabilityError
from tests.helpers.fake_ctc import (
    EOS,
    SECONDS_PER_FRAME,
    CharTokenizer,
    FakeCtcModel,
    build_fake_ctc,
    speechy_audio,
)
from tests.helpers.tiny_whisper import torch_threads

ctc = pytest.importorskip("oasr._C").ctc

BEAM = 6


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def setup(options=None, seed=0, b=4, t=24):
    loaded = build_fake_ctc(seed, sharpness=1.5, blank_bias=0.5)  # flat enough to disagree
    opts = {"beam_size": BEAM, **(options or {})}
    s = build_decode_strategy("ctc_aed_rescoring", loaded.model, opts,
                              tokenizer=loaded.tokenizer)
    s.feature_config = loaded.feature_config
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, t, loaded.model.encoder.proj.out_features, generator=gen)
    lens = torch.tensor([t, t - 3, t - 9, 5][:b])
    return s, loaded.model, hidden, lens


def requests(n, **decoding):
    return [Request(str(i), np.zeros(160, np.float32), DecodingOptions(**decoding))
            for i in range(n)]


def bigram(table: torch.Tensor, seq) -> float:
    total, prev = 0.0, EOS
    for tok in list(seq) + [EOS]:
        total += float(table[prev, tok])
        prev = tok
    return total


def expected(model: FakeCtcModel, hidden, lens, ctc_weight, reverse_weight):
    """Per row: (CTC n-best, fused scores)."""
    lp = model.ctc_log_probs(hidden).detach().numpy()
    rows = ctc.prefix_beam(lp, lens.numpy(), 0, BEAM, 1.0, BEAM)
    out = []
    for row in rows:
        fused = []
        for h in row:
            seq = h.tokens.tolist()
            att = bigram(model.l2r, seq)
            if reverse_weight > 0:
                att = (1 - reverse_weight) * att + reverse_weight * bigram(model.r2l, seq[::-1])
            fused.append(att + ctc_weight * h.score)
        out.append((row, fused))
    return out


def test_options_defaults_and_validation():
    o = CtcAedRescoringOptions()
    assert (o.beam_size, o.rescoring_ctc_weight, o.rescoring_reverse_weight,
            o.blank_skip_threshold) == (10, 0.5, 0.0, 1.0)
    for bad in ({"rescoring_reverse_weight": 1.5}, {"beam_size": 0},
                {"blank_skip_threshold": 0.0}):
        with pytest.raises(ValueError):
            resolve_options(CtcAedRescoringOptions, bad)


def test_capability_names_the_missing_members():
    class CtcOnly(torch.nn.Module):
        def encode_offline(self, f, n): ...

    with pytest.raises(MissingCapabilityError, match="attention_scores") as err:
        build_decode_strategy("ctc_aed_rescoring", CtcOnly())
    assert "ctc_log_probs" in str(err.value)


@pytest.mark.parametrize("ctc_weight,reverse_weight", [(0.5, 0.0), (0.3, 0.5), (0.0, 0.0)])
def test_the_winner_maximises_the_fused_score(ctc_weight, reverse_weight):
    s, model, hidden, lens = setup({"rescoring_ctc_weight": ctc_weight,
                                    "rescoring_reverse_weight": reverse_weight})
    outs = s.decode_offline(hidden, lens, requests(4))
    moved = 0
    for o, (row, fused) in zip(outs, expected(model, hidden, lens, ctc_weight, reverse_weight)):
        win = int(np.argmax(fused))
        assert o.token_ids == row[win].tokens.tolist()
        moved += win != 0
    assert moved > 0  # the attention pass changed some row's choice


def test_a_dominant_ctc_weight_returns_the_ctc_best():
    s, model, hidden, lens = setup({"rescoring_ctc_weight": 1e6})
    outs = s.decode_offline(hidden, lens, requests(4))
    for o, (row, _) in zip(outs, expected(model, hidden, lens, 0.5, 0.0)):
        assert o.token_ids == row[0].tokens.tolist()


def test_one_batched_attention_pass_over_every_rows_nbest():
    s, model, hidden, lens = setup({"rescoring_reverse_weight": 0.25})
    s.decode_offline(hidden, lens, requests(4))
    (call,) = model.calls.attention
    assert call["rows"] == 4 and call["reverse_weight"] == 0.25
    ctc_rows = [row for row, _ in expected(model, hidden, lens, 0.5, 0.0)]
    assert call["hyps"] == [[h.tokens.tolist() for h in row] for row in ctc_rows]
    assert all(len(r) == BEAM for r in call["hyps"])


def test_nbest_texts_follow_the_fused_ranking_and_timings_the_winner():
    s, model, hidden, lens = setup()
    reqs = requests(4, n_best=3)
    reqs[1].decoding.word_timestamps = True
    outs = s.decode_offline(hidden, lens, reqs)
    tok = CharTokenizer()
    for o, (row, fused) in zip(outs, expected(model, hidden, lens, 0.5, 0.0)):
        order = sorted(range(len(fused)), key=lambda i: -fused[i])
        assert o.nbest_texts == [tok.decode(row[i].tokens.tolist()).strip() for i in order[:3]]
        if o.request_id == "1":
            winner = row[order[0]]
            assert o.timestamps == pytest.approx((winner.frames * SECONDS_PER_FRAME).tolist())
            assert o.confidence == pytest.approx(float(np.mean(winner.probs)), rel=1e-12)


def test_engine_feeds_hidden_states_not_the_fused_forward(monkeypatch):
    loaded = build_fake_ctc(3, sharpness=2.0)
    model = loaded.model

    def no_fused(*a, **k):
        raise AssertionError("ctc_aed_rescoring must not run forward_offline")

    monkeypatch.setattr(model, "forward_offline", no_fused)
    audio = [speechy_audio(20 + i) for i in range(4)]
    engine = ASREngine(EngineConfig(device="cpu", decode_method="ctc_aed_rescoring",
                                    decode_options={"beam_size": 4}), loaded=loaded)
    outs = {o.request_id: o for o in engine.run(
        [Request(str(i), a, DecodingOptions(word_timestamps=True)) for i, a in enumerate(audio)])}
    assert all(o.error is None and o.words for o in outs.values())
    assert len(model.calls.attention) == 1  # one micro-batch, one pass
    # Each request alone, through the family directly, gives the same transcript.
    for i, a in enumerate(audio):
        feats, lens = engine.inputs([Request("x", a)])
        hidden, hidden_lens = model.encode_offline(feats, lens)
        (alone,) = engine.strategy.decode_offline(hidden, hidden_lens, requests(1))
        assert outs[str(i)].token_ids == alone.token_ids
