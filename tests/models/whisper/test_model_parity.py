"""Whisper against transformers on a tiny random model.

Oracle: transformers' ``WhisperForConditionalGeneration`` holding the same weights
(``tests/helpers/tiny_whisper.py``): the encoder output, teacher-forced logits, the incremental
prefill / step / select surface, greedy ``generate`` and beam ``generate`` where the two beam
searches share their semantics. Elsewhere beam search is checked against a cache-free
re-derivation of openai-whisper's beam search (the semantics it implements), and by its own
exactness property: width 1 reproduces greedy token for token.
"""

from __future__ import annotations

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode import build_decode_strategy
from oasr.engine.decode.incremental_beam import ArBeamGroup
from oasr.engine.request import DecodingOptions, Request
from oasr.engine.step_budget import StepBudget
from tests.helpers.tiny_whisper import (
    EOS,
    LANGS,
    SOT,
    TASKS,
    VOCAB,
    TinyWhisper,
    build_tiny_whisper,
    features_for,
    hf_generate,
    parse_ids,
    random_audio,
    run_engine,
    torch_threads,
)

pytest.importorskip("transformers")

ATOL = 1e-5


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tiny() -> TinyWhisper:
    return build_tiny_whisper(seed=0)


@pytest.fixture(scope="module")
def tiny_eos() -> TinyWhisper:
    """Rows end at input-dependent lengths (a mix of "stop" and "length")."""
    return build_tiny_whisper(seed=1, eos_bias=2.0)


def _audio(n: int, offset: int = 0) -> list:
    return [random_audio(offset + i) for i in range(n)]


def _hf_logits(tw: TinyWhisper, feats: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return tw.hf(input_features=feats.transpose(1, 2), decoder_input_ids=tokens).logits


def _random_tokens(tw: TinyWhisper, batch: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(11, VOCAB, (batch, length), generator=g)
    return torch.cat([torch.tensor([tw.prompt] * batch), body], dim=1)


# -- the model surface ------------------------------------------------------------------------


def test_state_dict_is_transformers_without_prefix_and_head(tiny):
    ours = set(tiny.model.state_dict())
    theirs = {k.removeprefix("model.") for k in tiny.hf.state_dict() if k != "proj_out.weight"}
    assert ours == theirs
    assert {k: tuple(v.shape) for k, v in tiny.model.state_dict().items()} == \
        tiny.config.parameter_shapes()


def test_encoder_matches_transformers(tiny):
    feats = features_for(_audio(4), tiny.loaded.feature_config)
    assert feats.shape == (4, 40, 8)
    with torch.no_grad():
        ours = tiny.model.encode_offline(feats)
        ref = tiny.hf.model.encoder(feats.transpose(1, 2)).last_hidden_state
    assert ours.shape == (4, 20, 32)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=ATOL)


def test_encoder_refuses_more_frames_than_its_window(tiny):
    feats = torch.zeros(1, 42, 8)
    with pytest.raises(ValueError, match="window"):
        tiny.model.encode_offline(feats)


def test_teacher_forced_logits_match_transformers(tiny):
    feats = features_for(_audio(3, 10), tiny.loaded.feature_config)
    tokens = _random_tokens(tiny, 3, 14, seed=0)
    with torch.no_grad():
        ours = tiny.model.decoder.forced_logits(tiny.model.encode_offline(feats), tokens)
    ref = _hf_logits(tiny, feats, tokens)
    assert ours.shape == ref.shape == (3, 16, VOCAB)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=ATOL)


def test_prefill_then_steps_match_transformers_at_every_position(tiny):
    feats = features_for(_audio(3, 20), tiny.loaded.feature_config)
    tokens = _random_tokens(tiny, 3, 10, seed=1)
    ref = _hf_logits(tiny, feats, tokens)
    p = len(tiny.prompt)
    dec = tiny.model.decoder
    with torch.no_grad():
        enc = tiny.model.encode_offline(feats)
        logits, state = dec.prefill(enc, tokens[:, :p], capacity=tokens.shape[1])
        torch.testing.assert_close(logits, ref[:, p - 1], atol=ATOL, rtol=ATOL)
        for i in range(p, tokens.shape[1]):
            logits = dec.step(tokens[:, i], state)
            torch.testing.assert_close(logits, ref[:, i], atol=ATOL, rtol=ATOL)
    assert state.kv.lens.tolist() == [tokens.shape[1]] * 3


def test_rows_at_different_depths_merge_retire_and_fork(tiny):
    """Two groups prefilled at different times merge (each row keeps its own KV extent), a row
    retires by selection, and a repeated-index select forks rows as beam expansion does: every
    row's logits stay those of its own sequence."""
    feats = features_for(_audio(4, 30), tiny.loaded.feature_config)
    tokens = _random_tokens(tiny, 4, 12, seed=2)
    ref = _hf_logits(tiny, feats, tokens)
    p = len(tiny.prompt)
    cap = tokens.shape[1] + 2
    dec = tiny.model.decoder
    with torch.no_grad():
        enc = tiny.model.encode_offline(feats)
        _, a = dec.prefill(enc[:2], tokens[:2, :p], cap)
        for i in range(p, p + 3):  # group a runs three tokens ahead
            dec.step(tokens[:2, i], a)
        _, b = dec.prefill(enc[2:], tokens[2:, :p], cap)
        assert a.can_merge(b)
        state = a.merge(b)
        pos = [p + 3, p + 3, p, p]  # the position each row feeds next
        for _ in range(4):
            logits = dec.step(tokens[torch.arange(4), pos], state)
            for r in range(4):
                torch.testing.assert_close(logits[r], ref[r, pos[r]], atol=ATOL, rtol=ATOL)
            pos = [q + 1 for q in pos]
        # Retire row 1, fork row 2 into two slots that then follow different continuations.
        keep = [0, 2, 2, 3]
        state = dec.select(state, torch.tensor(keep))
        alt = tokens[2].clone()
        alt[pos[2]:] = torch.randint(11, VOCAB, (alt.shape[0] - pos[2],),
                                     generator=torch.Generator().manual_seed(3))
        seqs = torch.stack([tokens[0], tokens[2], alt, tokens[3]])
        ref2 = _hf_logits(tiny, feats[keep], seqs)
        pos = [pos[k] for k in keep]
        for _ in range(3):
            logits = dec.step(seqs[torch.arange(4), pos], state)
            for r in range(4):
                torch.testing.assert_close(logits[r], ref2[r, pos[r]], atol=ATOL, rtol=ATOL)
            pos = [q + 1 for q in pos]


def test_prefill_refuses_capacity_past_the_decoder_positions(tiny):
    enc = torch.zeros(1, 20, 32)
    with pytest.raises(ValueError, match="64 positions"):
        tiny.model.decoder.prefill(enc, torch.tensor([tiny.prompt]), capacity=65)


# -- greedy through the engine ------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tiny", "tiny_eos"])
def test_engine_greedy_matches_transformers_generate(which, request):
    tw = request.getfixturevalue(which)
    audio = _audio(10, 100)
    n = 24
    ours = run_engine(tw.loaded, audio, max_batch_size=4, max_new_tokens=n)
    feats = features_for(audio, tw.loaded.feature_config)
    ref = hf_generate(tw, feats, [tw.prompt] * len(audio), n, do_sample=False, num_beams=1)
    reasons = set()
    for i, expected in enumerate(ref):
        out = ours[str(i)]
        assert out.error is None
        assert out.token_ids == expected, f"row {i}"
        assert out.finish_reason == ("length" if len(expected) == n else "stop")
        assert out.text == " ".join(map(str, expected))
        assert out.language == "en"
        assert 0.0 < out.confidence <= 1.0
        reasons.add(out.finish_reason)
    if which == "tiny_eos":
        assert reasons == {"stop", "length"}  # both ends are exercised


def test_multilingual_detection_and_prompt_slots_match_transformers():
    tw = build_tiny_whisper(seed=2, multilingual=True)
    audio = _audio(6, 200)
    feats = features_for(audio, tw.loaded.feature_config)
    decodings = [DecodingOptions(), DecodingOptions(), DecodingOptions(language="es"),
                 DecodingOptions(language="de", task="translate"),
                 DecodingOptions(task="translate"), DecodingOptions(language="EN")]
    n = 12
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=6, max_new_tokens=n)

    lang_ids = torch.tensor(sorted(LANGS.values()))
    code = {v: k for k, v in LANGS.items()}
    sot_logits = _hf_logits(tw, feats, torch.full((6, 1), SOT))[:, 0]
    detected = [code[int(lang_ids[j])] for j in sot_logits[:, lang_ids].argmax(-1)]
    langs = [d.language.lower() if d.language else detected[i] for i, d in enumerate(decodings)]
    prompts = [[SOT, LANGS[lang], TASKS[d.task or "transcribe"], 10]
               for lang, d in zip(langs, decodings)]
    ref = hf_generate(tw, feats, prompts, n, do_sample=False, num_beams=1)
    for i in range(6):
        assert ours[str(i)].language == langs[i]
        assert ours[str(i)].token_ids == ref[i], f"row {i}"
    assert len({tuple(p) for p in prompts}) > 2  # the slots really vary across the batch


# -- beam search --------------------------------------------------------------------------------


def _scores(tw: TinyWhisper, audio, hyps: list[list[int]], stopped: list[bool]) -> list[float]:
    """Sum of log-probs of each hypothesis (and its eos when it stopped) under the engine's
    logit processing: suppress_tokens every step, begin_suppress_tokens on the first token."""
    cfg = tw.config
    out = []
    with torch.no_grad():
        enc = tw.model.encode_offline(features_for(audio, tw.loaded.feature_config))
        for i, (toks, stop) in enumerate(zip(hyps, stopped)):
            targets = toks + [EOS] if stop else toks
            seq = torch.tensor([tw.prompt + targets[:-1]])
            logits = tw.model.decoder.forced_logits(enc[i:i + 1], seq)[0, len(tw.prompt) - 1:]
            logits[:, cfg.suppress_tokens] = float("-inf")
            logits[0, cfg.begin_suppress_tokens] = float("-inf")
            lp = torch.log_softmax(logits, -1)
            out.append(sum(lp[j, t].item() for j, t in enumerate(targets)))
    return out


@pytest.mark.parametrize("k", [2, 3, 4])
def test_beam_matches_transformers_where_semantics_agree(k):
    """Exact ids against ``generate(num_beams=k)``.

    The two beam searches agree when no token is suppressed (transformers suppresses after the
    log-softmax, without renormalizing; we renormalize, as openai-whisper does),
    ``length_penalty=0`` (transformers counts the eos in a finished hypothesis' length; we do
    not) and ``early_stopping=True`` (a request ends with ``k`` finished hypotheses).
    """
    tw = build_tiny_whisper(seed=1, eos_bias=2.0, suppress=False)
    audio = _audio(10, 300)
    n = 20
    ours = run_engine(tw.loaded, audio, max_batch_size=5, max_new_tokens=n,
                      decode_options={"beam_size": k, "length_penalty": 0.0})
    feats = features_for(audio, tw.loaded.feature_config)
    ref = hf_generate(tw, feats, [tw.prompt] * len(audio), n, do_sample=False, num_beams=k,
                      length_penalty=0.0, early_stopping=True)
    for i, expected in enumerate(ref):
        assert ours[str(i)].token_ids == expected, f"row {i}"
        assert ours[str(i)].finish_reason == ("length" if len(expected) == n else "stop")


def _beam_width_one(tw: TinyWhisper, audio, max_new: int) -> dict:
    """Decode through ``ArBeamGroup`` with k = 1 (``beam_size=1`` routes to greedy)."""
    cfg = EngineConfig(device="cpu", max_new_tokens=max_new)
    strategy = build_decode_strategy("aed", tw.model, {"beam_size": 1},
                                     tokenizer=tw.loaded.tokenizer, engine_config=cfg)
    requests = [Request(str(i), a) for i, a in enumerate(audio)]
    with torch.no_grad():
        enc = tw.model.encode_offline(features_for(audio, tw.loaded.feature_config))
        logits, state, rows = strategy.prefill_rows(requests, enc, None)
        strategy.beams.append(ArBeamGroup(
            rows, state, tw.model.decoder, strategy.process_logits(logits.float(), first=True),
            beam_size=1, eos_id=tw.config.eos_token_id, length_penalty=1.0,
        ))
        outs = []
        while strategy.has_pending():
            outs += strategy.advance(StepBudget.unlimited())
    assert not strategy.groups  # the greedy path was not used
    return {o.request_id: o for o in outs}


@pytest.mark.parametrize("which", ["tiny", "tiny_eos"])
def test_beam_width_one_reproduces_greedy(which, request):
    tw = request.getfixturevalue(which)
    audio = _audio(24, 400)
    n = 20
    greedy = run_engine(tw.loaded, audio, max_batch_size=8, max_new_tokens=n)
    beam = _beam_width_one(tw, audio, n)
    assert set(beam) == set(greedy)
    for rid, g in greedy.items():
        b = beam[rid]
        assert (b.token_ids, b.finish_reason, b.text) == (g.token_ids, g.finish_reason, g.text)
        assert b.confidence == pytest.approx(g.confidence, abs=1e-6)


def _reference_beam(tw: TinyWhisper, enc: torch.Tensor, k: int, max_new: int,
                    length_penalty: float) -> list[int]:
    """openai-whisper's beam search (``BeamSearchDecoder`` + ``MaximumLikelihoodRanker``),
    re-derived on teacher-forced logits with no cache: each live prefix proposes its top k + 1
    tokens; candidates are walked by score, an eos one banked as finished until k live ones are
    kept; a request ends with k finished (or at the cap, topped up with the live ones) and the
    best is max sum log p / length ** length_penalty, the eos counted in the sum, not the
    length."""
    cfg = tw.config
    alive: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    finished: dict[tuple[int, ...], float] = {}
    for step in range(max_new):
        seqs = torch.tensor([tw.prompt + list(t) for t, _ in alive])
        logits = tw.model.decoder.forced_logits(enc.expand(len(alive), -1, -1), seqs)[:, -1]
        logits[:, cfg.suppress_tokens] = float("-inf")
        if step == 0:
            logits[:, cfg.begin_suppress_tokens] = float("-inf")
        logp = torch.log_softmax(logits, -1)
        scores: dict[tuple[int, ...], float] = {}
        for (prefix, total), row in zip(alive, logp):
            top = row.topk(k + 1)
            for value, token in zip(top.values.tolist(), top.indices.tolist()):
                scores[prefix + (token,)] = total + value
        alive, fresh = [], {}
        for seq in sorted(scores, key=scores.get, reverse=True):
            if seq[-1] == EOS:
                fresh[seq[:-1]] = scores[seq]
            else:
                alive.append((seq, scores[seq]))
                if len(alive) == k:
                    break
        for seq in sorted(fresh, key=fresh.get, reverse=True):
            if len(finished) < k:
                finished[seq] = fresh[seq]
        if len(finished) >= k:
            break
    else:
        for seq, total in alive:
            if len(finished) < k:
                finished[seq] = total
    return list(max(finished, key=lambda t: finished[t] / max(len(t), 1) ** length_penalty))


@pytest.mark.parametrize("k,length_penalty", [(4, 1.0), (3, 0.0)])
def test_beam_matches_openai_whisper_semantics(tiny_eos, k, length_penalty):
    """Exact ids with the checkpoint's suppression, against a cache-free re-derivation of
    openai-whisper's beam search (whose default ranking is length_penalty=1 here)."""
    tw = tiny_eos
    audio = _audio(10, 500)
    n = 16
    ours = run_engine(tw.loaded, audio, max_batch_size=5, max_new_tokens=n,
                      decode_options={"beam_size": k, "length_penalty": length_penalty})
    with torch.no_grad():
        enc = tw.model.encode_offline(features_for(audio, tw.loaded.feature_config))
        for i in range(len(audio)):
            expected = _reference_beam(tw, enc[i:i + 1], k, n, length_penalty)
            assert ours[str(i)].token_ids == expected, f"row {i}"
            assert ours[str(i)].finish_reason == ("length" if len(expected) == n else "stop")
    greedy = run_engine(tw.loaded, audio, max_batch_size=5, max_new_tokens=n)
    assert any(greedy[r].token_ids != o.token_ids for r, o in ours.items())  # not just greedy


def test_n_best_returns_ranked_distinct_hypotheses(tiny_eos):
    tw = tiny_eos
    audio = _audio(6, 600)
    n = 16
    outs = run_engine(tw.loaded, audio, [DecodingOptions(n_best=3)] * len(audio),
                      max_batch_size=6, max_new_tokens=n, decode_options={"beam_size": 4})
    for i, a in enumerate(audio):
        out = outs[str(i)]
        assert len(out.nbest_texts) == 3
        assert out.nbest_texts[0].strip() == out.text
        hyps = [parse_ids(t) for t in out.nbest_texts]
        assert len({tuple(h) for h in hyps}) == 3
        # An eos-finished hypothesis is shorter than the cap; one at the cap ran out of room.
        scores = _scores(tw, [a] * 3, hyps, [len(h) < n for h in hyps])
        ranks = [s / max(len(h), 1) for s, h in zip(scores, hyps)]
        assert all(x >= y - 1e-5 for x, y in zip(ranks, ranks[1:])), ranks
