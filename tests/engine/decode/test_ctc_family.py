"""The ``ctc`` decode family: options, admission, outputs (text, n-best, confidence, word
timings) and the engine path (``consumes = "log_probs"``) on a fake CTC model.

Oracles: the decoders themselves are tested against independent statements in test_ctc.py, so
here the family must hand their hypotheses through unchanged; confidences and word spans are
recomputed from the log-probs by hand; batching must not change a row (each request decoded
alone).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode import build_decode_strategy
from oasr.engine.decode.ctc import CtcOptions
from oasr.engine.decode.options import resolve_options
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.engine.decode.test_ctc import posterior, random_log_probs, ref_greedy
from tests.helpers.fake_ctc import (
    PIECES,
    SECONDS_PER_FRAME,
    VOCAB,
    CharTokenizer,
    build_fake_ctc,
    speechy_audio,
)
from tests.helpers.tiny_whisper import torch_threads

ctc = pytest.importorskip("oasr._C").ctc


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def strategy(options=None, with_clock=True):
    loaded = build_fake_ctc(0, with_clock=with_clock)
    s = build_decode_strategy("ctc", loaded.model, options, tokenizer=loaded.tokenizer)
    s.feature_config = loaded.feature_config
    return s


def requests(n, **decoding):
    return [Request(str(i), np.zeros(160, np.float32), DecodingOptions(**decoding))
            for i in range(n)]


def lp_batch(seed=0, b=3, t=30):
    rng = np.random.default_rng(seed)
    lp = random_log_probs(rng, b, t, VOCAB, scale=3.0, blank_bias=1.5)
    lp[..., VOCAB - 1] = -30.0  # the fake's sos/eos id, which CTC never emits
    lens = np.array([t, t - 7, t // 2][:b])
    return torch.from_numpy(lp), torch.from_numpy(lens)


# -- options and admission ----------------------------------------------------------------------


def test_options_defaults_strings_and_validation():
    opts = CtcOptions()
    assert (opts.beam_size, opts.blank_skip_threshold, opts.nbest) == (10, 1.0, 1)
    opts = resolve_options(CtcOptions, {"beam_size": "4", "blank_skip_threshold": "0.98",
                                        "nbest": "2"})
    assert (opts.beam_size, opts.blank_skip_threshold, opts.nbest) == (4, 0.98, 2)
    for bad in ({"beam_size": 0}, {"nbest": 3, "beam_size": 2}, {"blank_skip_threshold": 0.0},
                {"blank_skip_threshold": 1.5}):
        with pytest.raises(ValueError):
            resolve_options(CtcOptions, bad)
    with pytest.raises(KeyError, match="beam_size"):
        resolve_options(CtcOptions, {"beam": 3})


def test_admission_refuses_what_ctc_cannot_honour():
    s = strategy({"beam_size": 3})
    s.validate_options(DecodingOptions(word_timestamps=True, n_best=3))
    with pytest.raises(ValueError, match="n_best=4 exceeds beam_size=3"):
        s.validate_options(DecodingOptions(n_best=4))
    with pytest.raises(ValueError, match="temperature"):
        s.validate_options(DecodingOptions(temperature=0.5))
    for option in ({"task": "translate"}, {"language": "en"}, {"timestamps": True}):
        with pytest.raises(ValueError, match="cannot act on"):
            s.validate_options(DecodingOptions(**option))
    assert s.word_timing_modes == ("offline",)


def test_word_timings_refused_without_a_frame_clock():
    s = strategy(with_clock=False)
    assert s.clock is None and s.word_timing_modes == ()
    with pytest.raises(ValueError, match="subsampling_rate"):
        s.validate_options(DecodingOptions(word_timestamps=True))
    s.validate_options(DecodingOptions())  # a row not asking is fine


# -- outputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("beam", [1, 5])
def test_outputs_carry_the_decoders_best_hypothesis(beam):
    s = strategy({"beam_size": beam})
    lp, lens = lp_batch(1)
    outs = s.decode_offline(lp, lens, requests(3))
    if beam == 1:
        want = [ref_greedy(lp[b].numpy(), int(lens[b]), 0)[0] for b in range(3)]
    else:
        want = [h[0].tokens.tolist()
                for h in ctc.prefix_beam(lp.numpy(), lens.numpy(), 0, beam, 1.0, 1)]
    tok = CharTokenizer()
    for b, o in enumerate(outs):
        assert o.request_id == str(b)
        assert o.token_ids == want[b]
        assert o.text == tok.decode(want[b]).strip()
        assert o.words is None and o.timestamps is None and o.nbest_texts is None


def test_confidence_is_the_mean_posterior_at_the_emitting_frames():
    s = strategy({"beam_size": 1})
    lp, lens = lp_batch(2)
    outs = s.decode_offline(lp, lens, requests(3))
    for b, o in enumerate(outs):
        x = lp[b].numpy()
        tokens, frames, _ = ref_greedy(x, int(lens[b]), 0)
        want = [posterior(x, int(lens[b]), u, t) for u, t in zip(tokens, frames)]
        assert o.confidence == pytest.approx(sum(want) / len(want), rel=1e-12)


def test_nbest_texts_from_the_request_or_the_family_option():
    lp, lens = lp_batch(3)
    beam = ctc.prefix_beam(lp.numpy(), lens.numpy(), 0, 6, 1.0, 6)
    tok = CharTokenizer()
    s = strategy({"beam_size": 6})
    reqs = requests(3)
    reqs[1].decoding.n_best = 4
    outs = s.decode_offline(lp, lens, reqs)
    assert outs[0].nbest_texts is None and outs[2].nbest_texts is None
    assert outs[1].nbest_texts == [tok.decode(h.tokens.tolist()).strip() for h in beam[1][:4]]
    assert outs[1].nbest_texts[0] == outs[1].text
    outs = strategy({"beam_size": 6, "nbest": 2}).decode_offline(lp, lens, requests(3))
    assert [len(o.nbest_texts) for o in outs] == [2, 2, 2]


def test_word_timings_from_the_recorded_emission_frames():
    # Path: _ a b _ ' ' c _ _  -> "ab c"; frames 1, 2, 4, 5 of 8.
    ids = {p: i for i, p in enumerate(PIECES)}
    path = [0, ids["a"], ids["b"], 0, ids[" "], ids["c"], 0, 0]
    lp = np.full((1, len(path), VOCAB), math.log(0.02), dtype=np.float32)
    for t, u in enumerate(path):
        lp[0, t, u] = math.log(0.75)
    lp = torch.from_numpy(lp)
    for beam in (1, 4):
        s = strategy({"beam_size": beam})
        reqs = requests(2)
        reqs[0].decoding.word_timestamps = True
        timed, plain = s.decode_offline(lp.expand(2, -1, -1), torch.tensor([8, 8]), reqs)
        assert timed.text == plain.text == "ab c"
        spf = SECONDS_PER_FRAME
        assert timed.timestamps == pytest.approx([1 * spf, 2 * spf, 4 * spf, 5 * spf])
        # A word runs from its first token's frame to where its last token's span ends (the
        # next emission, or the end of the row).
        assert [(w.word, w.start, w.end) for w in timed.words] == [
            ("ab", pytest.approx(1 * spf), pytest.approx(4 * spf)),
            ("c", pytest.approx(5 * spf), pytest.approx(8 * spf))]
        assert [w.confidence for w in timed.words] == pytest.approx([0.75, 0.75])
        assert timed.confidence == pytest.approx(plain.confidence) == pytest.approx(0.75)
        assert plain.words is None and plain.timestamps is None


def test_no_timing_work_when_no_row_asked(monkeypatch):
    import oasr.engine.decode.ctc as ctc_family

    calls = []
    monkeypatch.setattr(ctc_family, "fill_word_timings",
                        lambda *a, **k: calls.append(a[0].request_id))
    s = strategy({"beam_size": 4})
    lp, lens = lp_batch(4)
    s.decode_offline(lp, lens, requests(3))
    assert calls == []
    reqs = requests(3)
    reqs[2].decoding.word_timestamps = True
    s.decode_offline(lp, lens, reqs)
    assert calls == ["2"]


# -- the engine ---------------------------------------------------------------------------------


def run(loaded, audio, decodings=None, **config):
    decodings = decodings or [DecodingOptions() for _ in audio]
    engine = ASREngine(EngineConfig(device="cpu", **config), loaded=loaded)
    outs = engine.run([Request(str(i), a, d) for i, (a, d) in enumerate(zip(audio, decodings))])
    return engine, {o.request_id: o for o in outs}


def test_engine_runs_the_fused_forward_and_batching_changes_no_row():
    loaded = build_fake_ctc(1)
    audio = [speechy_audio(i) for i in range(6)]
    engine, batched = run(loaded, audio, decode_options={"beam_size": 4}, max_batch_size=6)
    assert engine.strategy.name == "ctc"  # the model's default family
    assert all(o.error is None for o in batched.values())
    assert sum(len(o.token_ids) for o in batched.values()) > 10
    for i, a in enumerate(audio):
        # The oracle: the fused forward on this request alone, then the decoder.
        feats, lens = engine.inputs([Request("x", a)])
        lp, out_lens = loaded.model.forward_offline(feats, lens)
        (best,) = ctc.prefix_beam(lp.detach().numpy(), out_lens.numpy(), 0, 4, 1.0, 1)[0]
        assert batched[str(i)].token_ids == best.tokens.tolist()


def test_engine_word_timings_and_their_refusal():
    audio = [speechy_audio(10 + i) for i in range(3)]
    decodings = [DecodingOptions(word_timestamps=True) for _ in audio]
    _, outs = run(build_fake_ctc(2), audio, decodings)
    for o in outs.values():
        assert o.error is None and o.words and len(o.timestamps) == len(o.token_ids)
        # Every word is a literal piece of the transcript, in order; times are on the 40 ms grid.
        pos = 0
        for w in o.words:
            pos = o.text.index(w.word, pos) + len(w.word)
            assert w.start < w.end
            for x in (w.start, w.end):
                assert x / SECONDS_PER_FRAME == pytest.approx(round(x / SECONDS_PER_FRAME))
    _, outs = run(build_fake_ctc(2, with_clock=False), audio, decodings)
    assert all("subsampling_rate" in o.error for o in outs.values())


def test_a_model_without_a_declared_blank_cannot_serve_ctc():
    from oasr.engine.decode import build_decode_strategy
    from oasr.models.interfaces import MissingCapabilityError

    class NoBlank:
        class config:  # noqa: N801 - stands in for a model config
            vocab_size = 5

        def forward_offline(self, features, lengths):
            raise AssertionError("not reached")

    with pytest.raises(MissingCapabilityError, match="config.blank_id"):
        build_decode_strategy("ctc", NoBlank())
