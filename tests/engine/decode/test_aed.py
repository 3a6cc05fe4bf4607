"""The ``aed`` family on the engine: group merging, retirement, end reasons, admission checks,
sampling, the repetition guard and the tick knobs, on a tiny random Whisper.

Oracles: each request decoded alone (batching and merging must not change a row), the model's
own teacher-forced logits (a "stop" row really chose eos next), and independent re-derivations
where the family promises a property (a guarded row really was looping).
"""

from __future__ import annotations

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.helpers.tiny_whisper import (
    EOS,
    TinyWhisper,
    build_tiny_whisper,
    features_for,
    random_audio,
    run_engine,
    torch_threads,
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tiny_ml() -> TinyWhisper:
    return build_tiny_whisper(seed=2, multilingual=True, with_hf=False)


def _audio(n: int, offset: int = 0) -> list:
    return [random_audio(offset + i) for i in range(n)]


def _ids(outs) -> dict:
    return {k: (o.token_ids, o.finish_reason) for k, o in outs.items()}


def _alone(tw: TinyWhisper, audio, decodings=None, **config) -> dict:
    """Each request decoded in an engine of its own."""
    decodings = decodings or [None] * len(audio)
    out = {}
    for i, (a, d) in enumerate(zip(audio, decodings)):
        o = run_engine(tw.loaded, [a], [d], max_batch_size=1, **config)["0"]
        out[str(i)] = (o.token_ids, o.finish_reason)
    return out


# -- groups -------------------------------------------------------------------------------------


def _drive(tw: TinyWhisper, audio, **config):
    """Tick the engine by hand; returns outputs and, per tick, the groups' row extents."""
    engine = ASREngine(EngineConfig(device="cpu", **config), loaded=tw.loaded)
    for i, a in enumerate(audio):
        engine.add_request(Request(str(i), a))
    outs, ticks = {}, []
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id] = o
        ticks.append([g.state.kv.lens.tolist() for g in engine.strategy.groups])
    return outs, ticks


MERGE_AUDIO = (4, 10)


@pytest.fixture(scope="module")
def merge_alone(tiny) -> dict:
    return _alone(tiny, _audio(*MERGE_AUDIO), max_new_tokens=24)


@pytest.mark.parametrize("merge", [True, False])
def test_micro_batches_admitted_at_different_ticks(tiny, merge_alone, merge):
    audio = _audio(*MERGE_AUDIO)
    n = 24
    outs, ticks = _drive(tiny, audio, max_batch_size=2, decode_steps_per_tick=2,
                         max_new_tokens=n, decode_options={"merge_groups": merge})
    if merge:
        # One group holding all four rows at two different depths: merged, not re-prefilled.
        merged = [t for t in ticks if len(t) == 1 and len(t[0]) == 4]
        assert merged and any(len(set(t[0])) == 2 for t in merged)
        assert all(len(t) <= 1 for t in ticks)
    else:
        assert any(len(t) == 2 for t in ticks)
        assert all(len(g) <= 2 for t in ticks for g in t)
    assert _ids(outs) == merge_alone
    assert all(o.finish_reason == "length" and len(o.token_ids) == n for o in outs.values())


def test_rows_retire_at_their_own_max_new_tokens(tiny):
    audio = _audio(5, 20)
    caps = [3, 7, None, 12, 1]
    n = 16
    full = run_engine(tiny.loaded, audio, max_batch_size=5, max_new_tokens=n)
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=5, max_new_tokens=n,
                                    decode_steps_per_tick=2), loaded=tiny.loaded)
    for i, (a, c) in enumerate(zip(audio, caps)):
        engine.add_request(Request(str(i), a, DecodingOptions(max_new_tokens=c)))
    outs, active = {}, []
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id] = o
        active.append(engine.strategy.active_rows)
    for i, c in enumerate(caps):
        out = outs[str(i)]
        cap = c or n
        assert out.finish_reason == "length"
        assert len(out.token_ids) == cap
        assert out.token_ids == full[str(i)].token_ids[:cap]  # retiring others left it intact
    assert 5 > max(active)  # the 1-token row never occupied a slot
    assert len(set(active)) > 2  # the group shrank row by row


def test_stop_means_the_model_chose_eos(tiny_eos):
    tw = tiny_eos
    audio = _audio(10, 100)
    n = 24
    outs = run_engine(tw.loaded, audio, max_batch_size=4, max_new_tokens=n)
    reasons = {o.finish_reason for o in outs.values()}
    assert reasons == {"stop", "length"}
    feats = features_for(audio, tw.loaded.feature_config)
    with torch.no_grad():
        enc = tw.model.encode_offline(feats)
    for i in range(len(audio)):
        out = outs[str(i)]
        assert EOS not in out.token_ids
        if out.finish_reason == "length":
            assert len(out.token_ids) == n
            continue
        assert len(out.token_ids) < n
        seq = torch.tensor([tw.prompt + out.token_ids])
        with torch.no_grad():
            last = tw.model.decoder.forced_logits(enc[i:i + 1], seq)[0, -1]
        last[tw.config.suppress_tokens] = float("-inf")
        assert int(last.argmax()) == EOS


@pytest.mark.parametrize("beam_size", [1, 3])
def test_one_token_requests_finish_on_the_prefill(tiny, beam_size):
    audio = _audio(3, 30)
    outs = run_engine(tiny.loaded, audio, [DecodingOptions(max_new_tokens=1)] * 3,
                      max_batch_size=3, max_new_tokens=8,
                      decode_options={"beam_size": beam_size})
    greedy = run_engine(tiny.loaded, audio, max_batch_size=3, max_new_tokens=8)
    for k, out in outs.items():
        assert out.finish_reason == "length"
        assert len(out.token_ids) == 1
        if beam_size == 1:
            assert out.token_ids == greedy[k].token_ids[:1]


# -- admission ----------------------------------------------------------------------------------


def test_english_only_refuses_another_language_and_the_rest_still_decode(tiny):
    audio = _audio(3, 40)
    engine = ASREngine(EngineConfig(device="cpu"), loaded=tiny.loaded)
    with pytest.raises(ValueError, match=r"'es'.*multilingual"):
        engine.add_request(Request("x", audio[0], DecodingOptions(language="es")))
    with pytest.raises(ValueError, match=r"translate.*multilingual"):
        engine.add_request(Request("x", audio[0], DecodingOptions(task="translate")))

    decodings = [None, DecodingOptions(language="es"), DecodingOptions(language="en")]
    outs = run_engine(tiny.loaded, audio, decodings, max_batch_size=3, max_new_tokens=8)
    assert "'es'" in outs["1"].error and "multilingual" in outs["1"].error
    assert outs["1"].text == "" and outs["1"].token_ids == []
    baseline = run_engine(tiny.loaded, [audio[0], audio[2]], max_new_tokens=8)
    for k, ref in (("0", "0"), ("2", "1")):
        assert outs[k].error is None
        assert outs[k].token_ids == baseline[ref].token_ids
        assert outs[k].language == "en"


def test_multilingual_refuses_an_unknown_language_listing_the_valid_ones(tiny_ml):
    engine = ASREngine(EngineConfig(device="cpu"), loaded=tiny_ml.loaded)
    with pytest.raises(ValueError, match=r"'xx'.*de, en, es"):
        engine.add_request(Request("x", _audio(1)[0], DecodingOptions(language="xx")))
    engine.add_request(Request("y", _audio(1)[0], DecodingOptions(language="es",
                                                                  task="translate")))


def test_word_timestamps_are_refused_at_admission(tiny):
    audio = _audio(2, 50)
    engine = ASREngine(EngineConfig(device="cpu"), loaded=tiny.loaded)
    with pytest.raises(ValueError, match="time words"):
        engine.add_request(Request("x", audio[0], DecodingOptions(word_timestamps=True)))
    outs = run_engine(tiny.loaded, audio, [DecodingOptions(word_timestamps=True), None],
                      max_new_tokens=4)
    assert "aed" in outs["0"].error and outs["1"].error is None


def test_a_text_prompt_without_a_whisper_tokenizer_is_refused_rather_than_ignored(tiny):
    # The tiny model's tokenizer only joins ids: it cannot encode a prompt.
    engine = ASREngine(EngineConfig(device="cpu"), loaded=tiny.loaded)
    with pytest.raises(ValueError, match="Whisper tokenizer"):
        engine.add_request(Request("x", _audio(1)[0], DecodingOptions(prompt="Mr. Quilter")))


def test_beam_refuses_sampling_and_n_best_past_the_beam(tiny):
    engine = ASREngine(EngineConfig(device="cpu", decode_options={"beam_size": 2}),
                       loaded=tiny.loaded)
    a = _audio(1)[0]
    with pytest.raises(ValueError, match="beam"):
        engine.add_request(Request("x", a, DecodingOptions(temperature=0.7)))
    with pytest.raises(ValueError, match="n_best=3 exceeds beam_size=2"):
        engine.add_request(Request("x", a, DecodingOptions(n_best=3)))


def test_decode_options_are_checked_at_construction(tiny):
    with pytest.raises(KeyError, match=r"beam_width.*valid: beam_size, length_penalty"):
        ASREngine(EngineConfig(device="cpu", decode_options={"beam_width": 4}),
                  loaded=tiny.loaded)
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        ASREngine(EngineConfig(device="cpu", decode_options={"beam_size": "0"}),
                  loaded=tiny.loaded)
    with pytest.raises(ValueError, match="repetition_guard"):
        ASREngine(EngineConfig(device="cpu", decode_options={"repetition_guard": 1}),
                  loaded=tiny.loaded)
    with pytest.raises(ValueError, match="expected <class 'int'>, got float"):
        ASREngine(EngineConfig(device="cpu", decode_options={"beam_size": 4.7}),
                  loaded=tiny.loaded)
    with pytest.raises(ValueError, match="kv_storage='paged' cannot serve beam search"):
        ASREngine(EngineConfig(device="cpu", kv_storage="paged",
                               decode_options={"beam_size": 2}), loaded=tiny.loaded)


# -- sampling -----------------------------------------------------------------------------------


def test_seeded_sampling_is_reproducible_whatever_the_batch(tiny):
    audio = _audio(4, 60)
    n = 16
    sampled = [DecodingOptions(temperature=1.5, seed=s) for s in (11, 12, 13, 14)]
    alone = _alone(tiny, audio[:2], sampled[:2], max_new_tokens=n)
    # Mixed with a greedy row and each other, in one batch or merged across ticks.
    mixed = sampled[:2] + [None, sampled[3]]
    together = run_engine(tiny.loaded, audio, mixed, max_batch_size=4, max_new_tokens=n)
    merged = run_engine(tiny.loaded, audio, mixed, max_batch_size=1, decode_steps_per_tick=2,
                        max_new_tokens=n)
    again = run_engine(tiny.loaded, audio, mixed, max_batch_size=4, max_new_tokens=n)
    assert _ids(again) == _ids(together) == _ids(merged)
    assert {k: _ids(together)[k] for k in alone} == alone
    greedy = run_engine(tiny.loaded, audio, max_batch_size=4, max_new_tokens=n)
    assert together["2"].token_ids == greedy["2"].token_ids
    # Sampling really happened: some seed strays from greedy, and seeds differ.
    assert any(together[k].token_ids != greedy[k].token_ids for k in ("0", "1", "3"))
    per_seed = run_engine(tiny.loaded, [audio[0]] * 4, sampled, max_batch_size=4,
                          max_new_tokens=n)
    assert len({tuple(o.token_ids) for o in per_seed.values()}) > 1


def test_top_k_one_and_a_tiny_top_p_are_greedy(tiny_eos):
    audio = _audio(6, 70)
    n = 16
    greedy = run_engine(tiny_eos.loaded, audio, max_batch_size=6, max_new_tokens=n)
    for d in (DecodingOptions(temperature=1.0, top_k=1, seed=0),
              DecodingOptions(temperature=2.0, top_p=1e-6, seed=0)):
        outs = run_engine(tiny_eos.loaded, audio, [d] * 6, max_batch_size=6, max_new_tokens=n)
        assert _ids(outs) == _ids(greedy)


# -- the repetition guard -----------------------------------------------------------------------


def _first_loop(tokens: list[int], guard: int, max_period: int = 16) -> tuple[int, int] | None:
    """(end, period) of the first prefix whose tail is >= ``guard`` copies of a unit of at most
    ``max_period`` ids covering >= 2 * guard ids, else None."""
    for end in range(1, len(tokens) + 1):
        for p in range(1, max_period + 1):
            copies = 1
            while (copies + 1) * p <= end and \
                    tokens[end - (copies + 1) * p:end - copies * p] == tokens[end - p:end]:
                copies += 1
            if copies >= guard and copies * p >= 2 * guard:
                return end, p
    return None


def test_repetition_guard_stops_looping_rows_only(tiny):
    audio = _audio(8, 80)
    n = 30
    guard = 3
    full = run_engine(tiny.loaded, audio, max_batch_size=8, max_new_tokens=n)
    outs = run_engine(tiny.loaded, audio, max_batch_size=8, max_new_tokens=n,
                      decode_options={"repetition_guard": guard})
    stopped = 0
    for k, ref in full.items():
        out, loop = outs[k], _first_loop(ref.token_ids, guard)
        if loop is None or loop[0] == n:  # never looping, or only as it reached its cap
            assert (out.token_ids, out.finish_reason) == (ref.token_ids, ref.finish_reason)
            continue
        end, _ = loop
        stopped += 1
        assert out.finish_reason == "repetition"
        kept = len(out.token_ids)
        assert ref.token_ids[:kept] == out.token_ids and kept < end
        # What was cut is the kept tail's unit repeated: the row was looping when it stopped.
        assert any(
            ref.token_ids[kept - p:end] == (ref.token_ids[kept - p:kept] * n)[:end - kept + p]
            and end - kept >= (guard - 1) * p
            for p in range(1, 17)
        ), (ref.token_ids, out.token_ids)
    assert 0 < stopped < len(outs)  # both kinds of row were present


# -- tick knobs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tiny", "tiny_eos"])
def test_eos_check_interval_does_not_change_outputs(which, request):
    """Finished rows keep stepping until the host reads the flags, past their own caps too."""
    tw = request.getfixturevalue(which)
    audio = _audio(7, 90)
    for n in (15, 18):
        base = _ids(run_engine(tw.loaded, audio, max_batch_size=3, max_new_tokens=n))
        for interval in (3, 4):
            outs = run_engine(tw.loaded, audio, max_batch_size=3, max_new_tokens=n,
                              decode_steps_per_tick=5,
                              decode_options={"eos_check_interval": interval})
            assert _ids(outs) == base, (n, interval)


def test_one_decode_step_per_tick_still_completes(tiny_eos):
    audio = _audio(5, 95)
    base = run_engine(tiny_eos.loaded, audio, max_batch_size=2, max_new_tokens=12)
    outs = run_engine(tiny_eos.loaded, audio, max_batch_size=2, max_new_tokens=12,
                      decode_steps_per_tick=1)
    assert _ids(outs) == _ids(base)
    beam = run_engine(tiny_eos.loaded, audio, max_batch_size=2, max_new_tokens=12,
                      decode_steps_per_tick=1, decode_options={"beam_size": 2})
    assert set(beam) == set(base) and all(o.error is None for o in beam.values())


def test_eos_check_interval_default_follows_the_device(tiny):
    from oasr.engine.decode import build_decode_strategy

    on_cpu = build_decode_strategy("aed", tiny.model)
    assert on_cpu.options.eos_check_interval == 0 and on_cpu.eos_check_interval == 1
    assert build_decode_strategy("aed", tiny.model,
                                 {"eos_check_interval": 5}).eos_check_interval == 5
