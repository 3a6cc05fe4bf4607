"""The ``transducer`` decode family: options, admission, beam 1 == greedy, n-best, word
timings from emission frames, a recurrent predictor (greedy only), the engine path.

Oracles: the searches are tested against icefall's in test_transducer_search.py, so here the
family must hand their hypotheses through unchanged; the word spans are recomputed by hand from
the emission frames; beam 1 must equal greedy token for token.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oasr.engine.decode import build_decode_strategy
from oasr.engine.decode.options import resolve_options
from oasr.engine.decode.transducer import TransducerOptions
from oasr.engine.decode.transducer_search import greedy_search, modified_beam_search
from oasr.engine.request import DecodingOptions, Request
from oasr.models.base import BaseAsrModel, TransducerPredictor
from oasr.models.transducer.stateless import AdditiveJoiner, StatelessPredictor
from tests.helpers.fake_ctc import (
    SECONDS_PER_FRAME,
    VOCAB,
    CharTokenizer,
    FakeEncoder,
    build_fake_ctc,
    speechy_audio,
)

ENC, DEC, JOIN = 16, 16, 24


class LstmPredictor(TransducerPredictor):
    """A recurrent predictor: state (h, c), no label window."""

    def __init__(self, blank_id: int = 0) -> None:
        super().__init__()
        self.blank_id = blank_id
        self.embedding = nn.Embedding(VOCAB, DEC)
        self.cell = nn.LSTMCell(DEC, DEC)

    def init_state(self, batch, device):
        z = torch.zeros(batch, DEC, device=device)
        h, c = self.cell(self.embedding(torch.full((batch,), self.blank_id, device=device)),
                         (z, z))
        return h, c

    def predict(self, state):
        return state[0]

    def advance(self, state, tokens, emitted):
        h, c = self.cell(self.embedding(tokens), state)
        keep = emitted.unsqueeze(1)
        return torch.where(keep, h, state[0]), torch.where(keep, c, state[1])

    def stack_states(self, states):
        return tuple(torch.cat(s) for s in zip(*states))

    def unstack_states(self, state):
        return list(zip(state[0].split(1), state[1].split(1)))


class FakeTransducerConfig:
    blank_id = 0
    unk_id = None
    vocab_size = VOCAB


class FakeTransducer(BaseAsrModel):
    decode_families = ("transducer",)
    encoder: FakeEncoder
    predictor: StatelessPredictor
    joiner: AdditiveJoiner

    def __init__(self, seed: int = 0, recurrent: bool = False) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.config = FakeTransducerConfig()
        self.encoder = FakeEncoder(ENC)
        self.predictor = (LstmPredictor() if recurrent
                          else StatelessPredictor(VOCAB, DEC, blank_id=0, context_size=2))
        self.joiner = AdditiveJoiner(ENC, DEC, JOIN, VOCAB)
        with torch.no_grad():  # sharp logits, so labels are emitted
            for p in self.parameters():
                p.mul_(4.0)

    def encode_offline(self, features, lengths):
        return self.encoder(features, lengths)


def strategy(options=None, recurrent=False, seed=0):
    model = FakeTransducer(seed, recurrent).eval()
    s = build_decode_strategy("transducer", model, options, tokenizer=CharTokenizer())
    s.feature_config = build_fake_ctc(0).feature_config
    return s


def requests(n, **decoding):
    return [Request(str(i), np.zeros(160, np.float32), DecodingOptions(**decoding))
            for i in range(n)]


def hidden_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 21, ENC, generator=g), torch.tensor([21, 14, 9])


def test_options_defaults_strings_and_validation():
    opts = TransducerOptions()
    assert (opts.beam_size, opts.max_sym_per_frame, opts.nbest) == (1, 1, 1)
    opts = resolve_options(TransducerOptions, {"beam_size": "4", "max_sym_per_frame": "3",
                                               "nbest": "2"})
    assert (opts.beam_size, opts.max_sym_per_frame, opts.nbest) == (4, 3, 2)
    for bad in ({"beam_size": 0}, {"max_sym_per_frame": 0}, {"nbest": 2}):
        with pytest.raises(ValueError):
            resolve_options(TransducerOptions, bad)


def test_admission():
    s = strategy({"beam_size": 3})
    assert s.word_timing_modes == ("offline",)
    s.validate_options(DecodingOptions(word_timestamps=True, n_best=3))
    with pytest.raises(ValueError, match="n_best=4 exceeds beam_size=3"):
        s.validate_options(DecodingOptions(n_best=4))
    with pytest.raises(ValueError, match="cannot act on"):
        s.validate_options(DecodingOptions(language="en"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_is_greedy_token_for_token(seed):
    greedy, beam1 = strategy(seed=seed), strategy({"beam_size": 1}, seed=seed)
    h, n = hidden_batch(seed)
    want = greedy_search(greedy.predictor, greedy.joiner, h, n)
    got = modified_beam_search(beam1.predictor, beam1.joiner, h, n, beam=1)
    assert sum(len(x.tokens) for x in want) > 0, "the random model emitted nothing"
    assert [g[0].tokens for g in got] == [w.tokens for w in want]
    assert [g[0].frames for g in got] == [w.frames for w in want]
    np.testing.assert_allclose([p for g in got for p in g[0].probs],
                               [p for w in want for p in w.probs], rtol=1e-5)


def test_outputs_carry_the_searches_hypotheses():
    h, n = hidden_batch(1)
    for opts, search in (({"max_sym_per_frame": 2}, "greedy"), ({"beam_size": 4}, "beam")):
        s = strategy(opts, seed=1)
        outs = s.decode_offline(h, n, requests(3))
        if search == "greedy":
            want = [x.tokens for x in greedy_search(s.predictor, s.joiner, h, n,
                                                    max_sym_per_frame=2)]
        else:
            want = [x[0].tokens for x in modified_beam_search(s.predictor, s.joiner, h, n, 4)]
        assert [o.token_ids for o in outs] == want
        assert [o.text for o in outs] == [CharTokenizer().decode(w).strip() for w in want]
        assert all(o.confidence is None or 0.0 < o.confidence <= 1.0 for o in outs)


def test_n_best_fills_nbest_texts_in_rank_order():
    s = strategy({"beam_size": 4})
    h, n = hidden_batch(2)
    outs = s.decode_offline(h, n, requests(3, n_best=3))
    ranked = modified_beam_search(s.predictor, s.joiner, h, n, 4, n_best=3)
    tok = CharTokenizer()
    for o, row in zip(outs, ranked):
        assert o.nbest_texts == [tok.decode(x.tokens).strip() for x in row]
        assert o.token_ids == row[0].tokens


def test_word_timings_from_emission_frames():
    s = strategy(seed=0)
    h, n = hidden_batch(0)
    outs = s.decode_offline(h, n, requests(3, word_timestamps=True))
    hyps = greedy_search(s.predictor, s.joiner, h, n)
    for o, hyp in zip(outs, hyps):
        # a token starts at its emitting frame
        assert o.timestamps == pytest.approx([f * SECONDS_PER_FRAME for f in hyp.frames])
        if o.words:
            assert all(w.start <= w.end for w in o.words)
            assert o.words[0].start == pytest.approx(hyp.frames[0] * SECONDS_PER_FRAME)


def test_recurrent_predictor_greedy_serves_beam_refused():
    s = strategy(recurrent=True)
    h, n = hidden_batch(0)
    outs = s.decode_offline(h, n, requests(3))
    want = greedy_search(s.predictor, s.joiner, h, n)
    assert [o.token_ids for o in outs] == [w.tokens for w in want]
    with pytest.raises(ValueError, match="beam_size=1"):
        strategy({"beam_size": 4}, recurrent=True)


def test_engine_path_consumes_hidden():
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine

    loaded = build_fake_ctc(0)
    loaded.model = FakeTransducer(0).eval()
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=3), loaded=loaded)
    assert engine.strategy.name == "transducer"  # the model's only family
    audio = [speechy_audio(i) for i in range(3)]
    outs = {o.request_id: o for o in engine.run([Request(str(i), a) for i, a in
                                                 enumerate(audio)])}
    assert sum(len(o.token_ids) for o in outs.values()) > 0
    for i, a in enumerate(audio):
        feats, lens = engine.inputs([Request("x", a)])
        h, hl = loaded.model.encode_offline(feats, lens)
        want = greedy_search(loaded.model.predictor, loaded.model.joiner, h, hl)[0].tokens
        assert outs[str(i)].token_ids == want


class IdTokenizer(CharTokenizer):
    """Encodes ``"3 4"`` as ``[3, 4]``: hotwords given as token ids."""

    def encode(self, text):
        return [int(t) for t in text.split()]


def _contains(seq, part):
    return any(seq[i:i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def test_hotwords_reach_the_beam_and_greedy_refuses_them():
    model = FakeTransducer(1).eval()
    s = build_decode_strategy("transducer", model, {"beam_size": 4, "nbest": 4},
                              tokenizer=IdTokenizer())
    h, n = hidden_batch(1)
    plain = s.decode_offline(h, n, requests(3))
    # A phrase of a runner-up that the plain search's best lacks.
    row, phrase = next((i, hyp.tokens[-3:]) for i, r in enumerate(s.search(h, n, 4))
                       for hyp in r[1:] if not _contains(r[0].tokens, hyp.tokens[-3:]))
    boosted = s.decode_offline(h, n, [Request(str(i), np.zeros(160, np.float32),
                                              DecodingOptions(hotwords=" ".join(map(str, phrase)),
                                                              hotwords_score=5.0)
                                              if i == row else DecodingOptions())
                                      for i in range(3)])
    assert _contains(boosted[row].token_ids, phrase)
    assert not _contains(plain[row].token_ids, phrase)
    assert [o.token_ids for i, o in enumerate(boosted) if i != row] == \
        [o.token_ids for i, o in enumerate(plain) if i != row]
    greedy = build_decode_strategy("transducer", model, None, tokenizer=IdTokenizer())
    with pytest.raises(ValueError, match="beam_size=4"):
        greedy.validate_options(DecodingOptions(hotwords="3 4"))
    with pytest.raises(ValueError, match="sets none"):
        s.validate_options(DecodingOptions(hotwords_score=1.0))
