"""The per-request decoding options on CUDA: the graphed, paged greedy path honours them
exactly as the eager dense path does, adds no host sync to a step, and the language
probabilities agree with the CPU's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.engine.step_budget import StepBudget
from tests.helpers.tiny_whisper import PromptTokenizer, build_tiny_whisper, random_audio

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

OPTIONS = [
    DecodingOptions(),
    DecodingOptions(repetition_penalty=1.5),
    DecodingOptions(no_repeat_ngram_size=2),
    DecodingOptions(suppress_tokens=[-1, 30, 31], suppress_blank=False),
    DecodingOptions(prefix="41 42"),
    DecodingOptions(hotwords="21 22"),
    DecodingOptions(temperature=0.8, best_of=3, seed=7),
    DecodingOptions(repetition_penalty=1.2, no_repeat_ngram_size=3, prefix="50"),
]


def _engine(multilingual: bool = False, **config) -> ASREngine:
    tw = build_tiny_whisper(seed=0, multilingual=multilingual, with_hf=False)
    loaded = replace(tw.loaded, tokenizer=PromptTokenizer())
    return ASREngine(EngineConfig(**config), loaded=loaded)


def _run(engine: ASREngine, options) -> dict:
    audio = [random_audio(i) for i in range(len(options))]
    return {o.request_id: (o.token_ids, o.finish_reason)
            for o in engine.run([Request(str(i), a, d)
                                 for i, (a, d) in enumerate(zip(audio, options))])}


@pytest.mark.gpu
@gpu
def test_graphed_paged_path_honours_every_option_as_eager_dense():
    config = {"device": "cuda", "dtype": "fp32", "max_batch_size": 4,
              "decode_steps_per_tick": 3, "max_new_tokens": 24}
    graphed = _engine(**config)
    ours = _run(graphed, OPTIONS)
    s = graphed.strategy
    assert s.kv_storage == "paged" and s.step_graphs.stats["replays"] > 0
    assert s.kv_pool.used_blocks == 0
    eager = _run(_engine(kv_storage="dense", decode_options={"use_step_graphs": False},
                         **config), OPTIONS)
    assert ours == eager
    # The CPU decodes the same (fp32; a near tie could differ, none does on these rows).
    cpu = _run(_engine(device="cpu", max_batch_size=4, max_new_tokens=24), OPTIONS)
    assert ours == cpu


@pytest.mark.gpu
@gpu
def test_a_step_with_rules_makes_no_host_sync():
    engine = _engine(device="cuda", kv_storage="paged", kv_block_size=64, max_new_tokens=48,
                     decode_steps_per_tick=4, decode_options={"eos_check_interval": 1000})
    for i, d in enumerate(OPTIONS[1:4] + OPTIONS[-1:]):
        engine.add_request(Request(str(i), random_audio(i), d))
    engine.step()  # admission, prefill, first steps (and the capture)
    strategy = engine.strategy
    before = [g.ngen.clone() for g in strategy.groups]
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.inference_mode():
            strategy.advance(StepBudget(8, float("inf")))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all((g.ngen - b).max() > 0 for g, b in zip(strategy.groups, before))


@pytest.mark.gpu
@gpu
def test_language_probabilities_on_cuda_match_the_cpu():
    options = [DecodingOptions(max_new_tokens=4)] * 3
    gpu_outs = {o.request_id: o for o in _engine(True, device="cuda", dtype="fp32").run(
        [Request(str(i), random_audio(i), d) for i, d in enumerate(options)])}
    cpu_outs = {o.request_id: o for o in _engine(True, device="cpu").run(
        [Request(str(i), random_audio(i), d) for i, d in enumerate(options)])}
    for k, o in gpu_outs.items():
        assert o.language == cpu_outs[k].language
        ref = dict(cpu_outs[k].all_language_probs)
        assert all(abs(p - ref[c]) < 1e-4 for c, p in o.all_language_probs)
