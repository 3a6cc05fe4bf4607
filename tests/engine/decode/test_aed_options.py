"""The ``aed`` family's per-request decoding rules against transformers' ``generate`` on a tiny
random Whisper holding the same weights (``tests/helpers/tiny_whisper.py``), token for token:
``repetition_penalty``, ``no_repeat_ngram_size``, ``suppress_tokens``, ``suppress_blank``,
``prefix``, ``hotwords`` (the decoder input faster-whisper's ``get_prompt`` builds) and
``max_new_tokens``; and the detected language's probabilities against a direct softmax.

Every batch mixes rows with and without the option: the rules are per row.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.helpers.tiny_whisper import (
    EOS,
    LANGS,
    SOT,
    PromptTokenizer,
    TinyWhisper,
    build_tiny_whisper,
    features_for,
    random_audio,
    run_engine,
    torch_threads,
)

pytest.importorskip("transformers")

N = 20


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def looping() -> TinyWhisper:
    """Rows mostly loop to their cap: what repetition rules act on."""
    tw = build_tiny_whisper(seed=0)
    tw.loaded = replace(tw.loaded, tokenizer=PromptTokenizer())
    return tw


@pytest.fixture(scope="module")
def stopping() -> TinyWhisper:
    tw = build_tiny_whisper(seed=1, eos_bias=2.0)
    tw.loaded = replace(tw.loaded, tokenizer=PromptTokenizer())
    return tw


def _audio(n: int, offset: int = 0) -> list:
    return [random_audio(offset + i) for i in range(n)]


def _generate(tw: TinyWhisper, audio, prompt: list[int], max_new: int, **kwargs) -> list[list]:
    """transformers' greedy ``generate`` one row at a time (no padding) from ``prompt``; each
    row's generated ids up to eos. Suppression defaults to the checkpoint's."""
    kwargs.setdefault("suppress_tokens", tw.config.suppress_tokens)
    kwargs.setdefault("begin_suppress_tokens", tw.config.begin_suppress_tokens)
    feats = features_for(audio, tw.loaded.feature_config)
    out = []
    with torch.no_grad():
        for i in range(len(audio)):
            seq = tw.hf.generate(feats[i:i + 1].transpose(1, 2),
                                 decoder_input_ids=torch.tensor([prompt]),
                                 max_new_tokens=max_new, do_sample=False, num_beams=1,
                                 **kwargs)[0].tolist()
            if seq[:len(prompt)] == prompt:
                seq = seq[len(prompt):]
            out.append(seq[:seq.index(EOS)] if EOS in seq else seq)
    return out


# -- repetition rules -------------------------------------------------------------------------


@pytest.mark.parametrize("rules", [
    {"repetition_penalty": 1.5}, {"repetition_penalty": 0.7}, {"no_repeat_ngram_size": 1},
    {"no_repeat_ngram_size": 2}, {"no_repeat_ngram_size": 3},
    {"repetition_penalty": 1.3, "no_repeat_ngram_size": 3},
])
def test_repetition_rules_match_transformers_per_row(looping, rules):
    audio = _audio(8, 100)
    decodings = [DecodingOptions(**rules) if i % 2 else None for i in range(len(audio))]
    ours = run_engine(looping.loaded, audio, decodings, max_batch_size=8, max_new_tokens=N)
    ruled = _generate(looping, audio, looping.prompt, N, **rules)
    plain = _generate(looping, audio, looping.prompt, N)
    for i in range(len(audio)):
        expected = ruled[i] if i % 2 else plain[i]
        assert ours[str(i)].token_ids == expected, f"row {i}"
    assert any(ruled[i] != plain[i] for i in range(1, len(audio), 2))  # the rule acted


def test_ngram_blocking_leaves_no_repeated_ngram(looping):
    audio = _audio(6, 150)
    outs = run_engine(looping.loaded, audio, [DecodingOptions(no_repeat_ngram_size=2)] * 6,
                      max_new_tokens=N)
    for o in outs.values():
        grams = list(zip(o.token_ids, o.token_ids[1:]))
        assert len(grams) == len(set(grams))


# -- suppression ---------------------------------------------------------------------------------


def test_suppress_tokens_and_blank_match_transformers(stopping):
    tw = stopping
    audio = _audio(6, 200)
    plain = run_engine(tw.loaded, audio, max_new_tokens=N)
    # The ids the plain decode uses most: suppressing them changes the transcripts.
    counts: dict[int, int] = {}
    for o in plain.values():
        for t in o.token_ids:
            counts[t] = counts.get(t, 0) + 1
    common = sorted(counts, key=counts.get, reverse=True)[:3]
    cases = [
        (DecodingOptions(suppress_tokens=[-1, *common]),
         {"suppress_tokens": sorted({*tw.config.suppress_tokens, *common})}),
        (DecodingOptions(suppress_tokens=common[:2]), {"suppress_tokens": common[:2]}),
        (DecodingOptions(suppress_tokens=None), {"suppress_tokens": None}),
        (DecodingOptions(suppress_blank=False), {"begin_suppress_tokens": None}),
        (DecodingOptions(suppress_tokens=[], suppress_blank=False),
         {"suppress_tokens": None, "begin_suppress_tokens": None}),
        (DecodingOptions(), {}),
    ]
    ours = run_engine(tw.loaded, audio, [d for d, _ in cases], max_batch_size=6,
                      max_new_tokens=N)
    for i, (_, hf_kwargs) in enumerate(cases):
        expected = _generate(tw, audio[i:i + 1], tw.prompt, N, **hf_kwargs)[0]
        assert ours[str(i)].token_ids == expected, f"case {i}"
        if i < 2:
            assert not set(ours[str(i)].token_ids) & set(common[:2])
    assert ours["0"].token_ids != plain["0"].token_ids


def test_an_explicit_list_adds_the_tokenizers_specials(stopping):
    class Specials(PromptTokenizer):
        sot = SOT
        no_speech = 12

    loaded = replace(stopping.loaded, tokenizer=Specials())
    engine = ASREngine(EngineConfig(device="cpu"), loaded=loaded)
    rules = engine.strategy.rules_of(DecodingOptions(suppress_tokens=[40]))
    assert rules.suppress == (1, SOT, 12, 40)  # sot_prev, sot, no_speech and the id
    assert engine.strategy.rules_of(DecodingOptions(suppress_tokens=None)).suppress == ()
    default = engine.strategy.rules_of(DecodingOptions()).suppress
    assert set(default) == {*stopping.config.suppress_tokens, 1, SOT, 12}


# -- prefix, hotwords, max_new_tokens ----------------------------------------------------------


def test_prefix_is_forced_and_kept_as_transformers_decodes_it(stopping):
    tw = stopping
    audio = _audio(6, 300)
    prefixes = [None, "11 12", "31 32 33", None, "11 12", "77"]
    caps = [None, 5, None, 3, None, None]
    decodings = [DecodingOptions(prefix=p, max_new_tokens=c) for p, c in zip(prefixes, caps)]
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=6, max_new_tokens=N)
    for i, (p, c) in enumerate(zip(prefixes, caps)):
        forced = [int(t) for t in p.split()] if p else []
        expected = _generate(tw, audio[i:i + 1], tw.prompt + forced, c or N)[0]
        out = ours[str(i)]
        assert out.token_ids == forced + expected, f"row {i}"
        # The cap counts generated tokens, not the prefix (faster-whisper's max_new_tokens).
        assert out.finish_reason == ("length" if len(expected) == (c or N) else "stop")
        assert out.text.startswith(p or "")


def test_hotwords_go_after_startofprev_as_faster_whisper_puts_them(stopping):
    tw = stopping
    engine = ASREngine(EngineConfig(device="cpu"), loaded=tw.loaded)
    prompter = engine.strategy.prompter
    limit = prompter.limit  # the tiny model's 64 positions: 31
    prev = list(range(40, 50))

    def faster_whisper_prompt(d: DecodingOptions) -> list[int]:
        # faster-whisper's get_prompt (before the SOT sequence), with max_length // 2 - 1
        # = limit; its prefix takes the tokens after the SOT sequence. (A blank hotwords
        # string is none here, as a blank prompt is; faster-whisper would encode " ".)
        out = []
        hotwords = d.hotwords if d.hotwords and d.hotwords.strip() else None
        if d.prompt or (hotwords and not d.prefix):
            out.append(1)
            if hotwords and not d.prefix:
                out += [int(t) for t in d.hotwords.split()][:limit]
            if d.prompt:
                out += d.prompt[-limit:]
        return out

    for d in (DecodingOptions(hotwords="21 22 23"), DecodingOptions(hotwords="21", prompt=prev),
              DecodingOptions(hotwords="21 22", prefix="60 61"), DecodingOptions(prompt=prev),
              DecodingOptions(hotwords="   ")):
        parts = prompter.parts(d)
        assert list(parts.context) == faster_whisper_prompt(d), d
    # Hotwords keep their first tokens, the previous text its last, within the one budget.
    long = " ".join(str(t) for t in range(50, 50 + limit))
    parts = prompter.parts(DecodingOptions(hotwords=long, prompt=prev))
    assert list(parts.context) == [1, *range(50, 50 + limit)]
    parts = prompter.parts(DecodingOptions(hotwords="21 22", prompt=list(range(100))))
    assert list(parts.context) == [1, 21, 22, *range(100 - (limit - 2), 100)]

    audio = _audio(3, 400)
    decodings = [DecodingOptions(hotwords="21 22 23"), None,
                 DecodingOptions(hotwords="21", prompt=prev)]
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=3, max_new_tokens=N)
    for i, d in enumerate(decodings):
        context = faster_whisper_prompt(d or DecodingOptions())
        expected = _generate(tw, audio[i:i + 1], context + tw.prompt, N)[0]
        assert ours[str(i)].token_ids == expected, f"row {i}"


def test_prefix_in_timestamp_mode_follows_a_zero_timestamp(stopping):
    """faster-whisper's placement: ``<|0.00|>`` then the prefix, after the SOT sequence without
    ``<|notimestamps|>`` (the tiny vocabulary has no text ids below its timestamps, so the
    segments themselves are checked on the real model)."""
    tw = stopping
    ts = tw.config.timestamp_begin
    engine = ASREngine(EngineConfig(device="cpu"), loaded=tw.loaded)
    parts = engine.strategy.prompter.parts(DecodingOptions(timestamps=True, prefix="11 12"))
    assert parts.forced == (ts, 11, 12) and parts.reserved == 2
    assert engine.strategy.prompter.parts(DecodingOptions(prefix="11 12")).forced == (11, 12)
    outs = run_engine(tw.loaded, _audio(2, 500),
                      [DecodingOptions(timestamps=True, prefix="11 12"),
                       DecodingOptions(timestamps=True)], max_new_tokens=N)
    assert outs["0"].token_ids[:3] == [ts, 11, 12]
    assert outs["1"].token_ids[0] >= ts  # the rules still open a segment unprefixed
    # The two modes' rows hold different forced counts, merge into one group and decode as
    # each does alone.
    both = [DecodingOptions(timestamps=True, prefix="11 12"), DecodingOptions(prefix="11 12")]
    audio = _audio(2, 510)
    together = run_engine(tw.loaded, audio, both, max_new_tokens=N)
    for i, d in enumerate(both):
        alone = run_engine(tw.loaded, [audio[i]], [d], max_new_tokens=N)["0"]
        assert together[str(i)].token_ids == alone.token_ids


# -- language probabilities ------------------------------------------------------------------


def test_language_probabilities_equal_a_softmax_over_the_language_tokens():
    tw = build_tiny_whisper(seed=2, multilingual=True)
    audio = _audio(5, 600)
    decodings = [None, DecodingOptions(language="es"), None, DecodingOptions(task="translate"),
                 None]
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=5, max_new_tokens=4)
    feats = features_for(audio, tw.loaded.feature_config)
    with torch.no_grad():
        logits = tw.hf(input_features=feats.transpose(1, 2),
                       decoder_input_ids=torch.full((5, 1), SOT)).logits[:, 0]
    codes = sorted(LANGS, key=LANGS.get)
    direct = torch.softmax(logits[:, [LANGS[c] for c in codes]], dim=-1)
    for i, d in enumerate(decodings):
        out = ours[str(i)]
        if d is not None and d.language is not None:
            assert out.language_probability is None and out.all_language_probs is None
            continue
        expected = dict(zip(codes, direct[i].tolist()))
        got = dict(out.all_language_probs)
        assert set(got) == set(codes)
        for c in codes:
            assert got[c] == pytest.approx(expected[c], abs=1e-5)
        probs = [p for _, p in out.all_language_probs]
        assert probs == sorted(probs, reverse=True)
        assert out.all_language_probs[0][0] == out.language
        assert out.language_probability == pytest.approx(expected[out.language], abs=1e-5)


def test_english_only_reports_no_language_probability(stopping):
    out = run_engine(stopping.loaded, _audio(1, 700), max_new_tokens=4)["0"]
    assert out.language == "en" and out.language_probability is None


# -- admission --------------------------------------------------------------------------------


def test_refusals_name_the_fix(stopping, looping):
    engine = ASREngine(EngineConfig(device="cpu"), loaded=stopping.loaded)
    audio = _audio(1)[0]
    for decoding, match in (
        (DecodingOptions(hotwords="1", hotwords_score=2.0), "hotwords_score"),
        (DecodingOptions(suppress_tokens=[100]), r"\[100\].*100-token"),
        (DecodingOptions(suppress_tokens=[-2]), "suppress_tokens"),
        (DecodingOptions(best_of=0), "best_of"),
        (DecodingOptions(patience=0.0), "patience"),
        (DecodingOptions(repetition_penalty=0.0), "repetition_penalty"),
        (DecodingOptions(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
    ):
        with pytest.raises(ValueError, match=match):
            engine.add_request(Request("x", audio, decoding))
    off = ASREngine(EngineConfig(device="cpu", decode_options={"max_prompt_tokens": 0}),
                    loaded=stopping.loaded)
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        off.add_request(Request("x", audio, DecodingOptions(prefix="11")))
    plain = ASREngine(EngineConfig(device="cpu"), loaded=build_tiny_whisper(
        seed=3, with_hf=False).loaded)  # JoinTokenizer: no encode, no <|startofprev|>
    with pytest.raises(ValueError, match="tokenizer"):
        plain.add_request(Request("x", audio, DecodingOptions(hotwords="11")))
