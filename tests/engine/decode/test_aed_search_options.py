"""The ``aed`` family's per-request search options: beam ``patience`` and ``length_penalty``
(with the logit rules and a prefix inside the beam), and ``best_of`` sampling.

Oracles: a cache-free re-derivation of openai-whisper's ``BeamSearchDecoder`` (patience as
``round(beam_size * patience)`` finished candidates, rounded half away from zero as
CTranslate2 rounds) on teacher-forced logits; for ``best_of``, each candidate decoded alone
from its own seed and ranked by faster-whisper's rule (sum log p with the end of text /
length ** length_penalty) from teacher-forced log-probabilities.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode.candidates import candidate_seed
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.helpers.tiny_whisper import (
    EOS,
    PromptTokenizer,
    TinyWhisper,
    build_tiny_whisper,
    features_for,
    random_audio,
    run_engine,
    torch_threads,
)

N = 14


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def stopping() -> TinyWhisper:
    tw = build_tiny_whisper(seed=1, eos_bias=2.0, with_hf=False)
    tw.loaded = replace(tw.loaded, tokenizer=PromptTokenizer())
    return tw


@pytest.fixture(scope="module")
def looping() -> TinyWhisper:
    tw = build_tiny_whisper(seed=0, with_hf=False)
    tw.loaded = replace(tw.loaded, tokenizer=PromptTokenizer())
    return tw


def _audio(n: int, offset: int = 0) -> list:
    return [random_audio(offset + i) for i in range(n)]


def _encode(tw: TinyWhisper, audio) -> torch.Tensor:
    with torch.no_grad():
        return tw.model.encode_offline(features_for(audio, tw.loaded.feature_config))


def _rules(tw: TinyWhisper, d: DecodingOptions, logits: torch.Tensor, tokens: list[int],
           first: bool) -> torch.Tensor:
    """transformers' processors on one row's raw logits (V,), in their order."""
    logits = logits.clone()
    if d.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(tokens)), dtype=torch.long)
        if len(seen):
            v = logits[seen]
            logits[seen] = torch.where(v < 0, v * d.repetition_penalty,
                                       v / d.repetition_penalty)
    n = d.no_repeat_ngram_size
    if n and len(tokens) >= n - 1:
        tail = tuple(tokens[len(tokens) - n + 1:]) if n > 1 else ()
        for s in range(len(tokens) - n + 1):
            if tuple(tokens[s:s + n - 1]) == tail:
                logits[tokens[s + n - 1]] = float("-inf")
    logits[tw.config.suppress_tokens] = float("-inf")
    if first:
        logits[tw.config.begin_suppress_tokens] = float("-inf")
    return logits


def _reference_beam(tw: TinyWhisper, enc: torch.Tensor, d: DecodingOptions, k: int,
                    max_new: int, family_lp: float = 1.0) -> list[int]:
    """openai-whisper's beam search with patience, a forced prefix and the logit rules, on
    teacher-forced logits with no cache."""
    limit = max(1, math.floor(k * (d.patience or 1.0) + 0.5))
    lp = family_lp if d.length_penalty is None else d.length_penalty
    forced = [int(t) for t in d.prefix.split()] if d.prefix else []
    start = 0.0
    if forced:
        logits = tw.model.decoder.forced_logits(enc, torch.tensor([tw.prompt + forced]))[0]
        lps = torch.log_softmax(logits[len(tw.prompt) - 1:-1], -1)
        start = sum(lps[i, t].item() for i, t in enumerate(forced))
    alive: list[tuple[tuple[int, ...], float]] = [(tuple(forced), start)]
    finished: dict[tuple[int, ...], float] = {}
    for step in range(max_new):
        seqs = torch.tensor([tw.prompt + list(t) for t, _ in alive])
        raw = tw.model.decoder.forced_logits(enc.expand(len(alive), -1, -1), seqs)[:, -1]
        scores: dict[tuple[int, ...], float] = {}
        for (prefix, total), row in zip(alive, raw):
            logp = torch.log_softmax(_rules(tw, d, row, list(prefix), step == 0), -1)
            top = logp.topk(k + 1)
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
            if len(finished) >= limit:
                break
            finished[seq] = fresh[seq]
        if len(finished) >= limit:
            break
    for seq, total in alive:  # openai-whisper's finalize: top up to beam_size
        if len(finished) >= k:
            break
        finished.setdefault(seq, total)
    return list(max(finished, key=lambda t: finished[t] / max(len(t), 1) ** lp))


# -- beam search ----------------------------------------------------------------------------------


def test_patience_and_length_penalty_per_request_match_openai_whisper(stopping):
    tw = stopping
    k = 3
    audio = _audio(5, 40)
    decodings = [DecodingOptions(), DecodingOptions(patience=2.0),
                 DecodingOptions(patience=0.5, length_penalty=0.0),
                 DecodingOptions(patience=1.5, length_penalty=0.6),
                 DecodingOptions(length_penalty=2.0)]
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=5, max_new_tokens=N,
                      decode_options={"beam_size": k, "length_penalty": 1.0})
    enc = _encode(tw, audio)
    expected = [_reference_beam(tw, enc[i:i + 1], d, k, N) for i, d in enumerate(decodings)]
    for i in range(len(audio)):
        assert ours[str(i)].token_ids == expected[i], f"row {i}"
    # The options change the search: some row decodes otherwise under the defaults.
    plain = [_reference_beam(tw, enc[i:i + 1], DecodingOptions(), k, N) for i in range(5)]
    assert any(expected[i] != plain[i] for i in range(1, 5))


@pytest.mark.parametrize("rules", [{"repetition_penalty": 1.4}, {"no_repeat_ngram_size": 2},
                                   {"prefix": "31 32"},
                                   {"prefix": "41", "no_repeat_ngram_size": 3}])
def test_beam_applies_each_slots_rules_as_openai_whisper_with_processors(looping, rules):
    tw = looping
    k = 2
    audio = _audio(4, 60)
    decodings = [DecodingOptions(**rules) if i % 2 else DecodingOptions() for i in range(4)]
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=4, max_new_tokens=N,
                      decode_options={"beam_size": k})
    enc = _encode(tw, audio)
    for i, d in enumerate(decodings):
        assert ours[str(i)].token_ids == _reference_beam(tw, enc[i:i + 1], d, k, N), f"row {i}"


# -- best_of ----------------------------------------------------------------------------------


def _score(tw: TinyWhisper, enc: torch.Tensor, tokens: list[int], stopped: bool) -> float:
    """faster-whisper's ranking (length_penalty 1): sum log p, the end of text included,
    over the engine's logit processing, / tokens."""
    targets = tokens + [EOS] if stopped else tokens
    seq = torch.tensor([tw.prompt + targets[:-1]])
    logits = tw.model.decoder.forced_logits(enc, seq)[0, len(tw.prompt) - 1:]
    logits[:, tw.config.suppress_tokens] = float("-inf")
    logits[0, tw.config.begin_suppress_tokens] = float("-inf")
    lp = torch.log_softmax(logits, -1)
    return sum(lp[j, t].item() for j, t in enumerate(targets)) / max(len(tokens), 1)


def _best_of_reference(tw: TinyWhisper, audio, decodings) -> tuple[list, list]:
    """Each candidate decoded alone from its seed; the winner per request and whether it
    was a later candidate."""
    enc = _encode(tw, audio)
    winners, later = [], []
    for i, d in enumerate(decodings):
        cands = []
        for c in range(d.best_of):
            alone = replace(d, best_of=1, seed=candidate_seed(d.seed, c))
            o = run_engine(tw.loaded, [audio[i]], [alone], max_new_tokens=N)["0"]
            cands.append((_score(tw, enc[i:i + 1], o.token_ids, o.finish_reason == "stop"),
                          -c, o.token_ids))
        best = max(cands)
        winners.append(best[2])
        later.append(best[1] != 0)
        assert len({tuple(t) for _, _, t in cands}) > 1  # sampling really varied
    return winners, later


def test_best_of_keeps_faster_whispers_best_candidate(stopping):
    tw = stopping
    audio = _audio(4, 80)
    decodings = [DecodingOptions(temperature=1.0, best_of=4, seed=10 + i) for i in range(4)]
    ours = run_engine(tw.loaded, audio, decodings, max_batch_size=4, max_new_tokens=N)
    winners, later = _best_of_reference(tw, audio, decodings)
    for i in range(len(audio)):
        assert ours[str(i)].token_ids == winners[i], f"row {i}"
    assert any(later)  # not just the first candidate
    # best_of does nothing at temperature 0 (faster-whisper's rule), and 1 is one candidate.
    greedy = run_engine(tw.loaded, audio, [DecodingOptions(best_of=4)] * 4, max_new_tokens=N)
    plain = run_engine(tw.loaded, audio, max_new_tokens=N)
    assert {k: o.token_ids for k, o in greedy.items()} == {
        k: o.token_ids for k, o in plain.items()}


@pytest.mark.parametrize("storage", ["dense", "paged"])
def test_candidates_wait_for_kv_room_and_decode_the_same(stopping, storage):
    """A KV budget of three rows: candidates past it wait (held by admission, so no new
    request takes their room), start as rows finish, and the results do not change."""
    tw = stopping
    audio = _audio(3, 90)
    decodings = [DecodingOptions(temperature=1.0, best_of=3, seed=20 + i) for i in range(2)]
    decodings.append(DecodingOptions())
    free = run_engine(tw.loaded, audio, decodings, max_new_tokens=N)

    probe = ASREngine(EngineConfig(device="cpu", max_new_tokens=N, kv_storage=storage,
                                   decode_kv_budget_gib=1.0), loaded=tw.loaded)
    budget = probe.strategy.kv_budget
    if storage == "paged":  # three rows of blocks and the pool's null block
        gib = (budget.block_bytes * budget.row_blocks * 3 + budget.block_bytes) / 2**30
    else:
        gib = budget.row_bytes * 3 / 2**30
    engine = ASREngine(EngineConfig(device="cpu", max_new_tokens=N, kv_storage=storage,
                                    decode_kv_budget_gib=gib, decode_steps_per_tick=2),
                       loaded=tw.loaded)
    strategy = engine.strategy
    assert strategy.kv_budget.admit_limit(0) == 3
    for i, (a, d) in enumerate(zip(audio, decodings)):
        engine.add_request(Request(str(i), a, d))
    outs, waited, held = {}, 0, 0
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id] = o
        waited = max(waited, strategy._waiting_rows)
        # Rows holding KV (a finished paged row gives its blocks back before compaction).
        held = max(held, strategy.kv_pool.used_blocks // strategy.kv_budget.row_blocks
                   if storage == "paged" else strategy.held_rows)
    assert waited > 0 and held <= 3
    assert {k: o.token_ids for k, o in outs.items()} == {
        k: o.token_ids for k, o in free.items()}


def test_best_of_reports_the_detected_language_whoever_wins():
    tw = build_tiny_whisper(seed=2, multilingual=True, with_hf=False)
    audio = _audio(2, 120)
    decodings = [DecodingOptions(temperature=1.0, best_of=3, seed=5 + i) for i in range(2)]
    gib = 1.0
    probe = ASREngine(EngineConfig(device="cpu", max_new_tokens=6, decode_kv_budget_gib=gib),
                      loaded=tw.loaded)
    gib = probe.strategy.kv_budget.row_bytes * 2 / 2**30  # two rows: most candidates wait
    outs = run_engine(tw.loaded, audio, decodings, max_new_tokens=6, decode_kv_budget_gib=gib)
    plain = run_engine(tw.loaded, audio, max_new_tokens=6)
    for k, o in outs.items():
        assert o.language == plain[k].language
        assert o.language_probability == pytest.approx(plain[k].language_probability)
        assert o.all_language_probs is not None

