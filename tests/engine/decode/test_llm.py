"""The ``llm`` family on a tiny random Qwen2-Audio: seeded sampling, token-streaming partials,
option refusals, merged groups, and (CUDA) decoder-step graphs equal to eager steps."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode.llm import LlmDecodeStrategy, LlmOptions
from oasr.engine.request import DecodingOptions, Request
from oasr.engine.step_budget import StepBudget
from oasr.models.loader import load_pretrained
from oasr.models.qwen2_audio.converters import HfQwen2AudioConverter
from tests.models.qwen2_audio.checkpoint import N_MELS, SOURCE_POSITIONS, make_checkpoint


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    make_checkpoint(root / "hf", seed=1)
    HfQwen2AudioConverter().convert(root / "hf", root / "bundle")
    return load_pretrained(str(root / "bundle"))


def _features(n: int, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, 2 * SOURCE_POSITIONS, N_MELS, generator=g)
    lens = torch.tensor([40, 31, 22, 13][:n] * (n // 4 + 1))[:n]
    return feats, lens


def _run(loaded, decodings, feats, lens, max_new=10, device="cpu", kv_storage="auto", **opts):
    model = loaded.model.to(device)
    strategy = LlmDecodeStrategy(model, LlmOptions(**opts), tokenizer=loaded.tokenizer,
                                 engine_config=EngineConfig(max_new_tokens=max_new,
                                                            kv_storage=kv_storage))
    requests = [Request(f"r{i}", feats.new_zeros(160).numpy(), d or DecodingOptions())
                for i, d in enumerate(decodings)]
    for r in requests:
        strategy.validate_options(r.decoding)
    with torch.no_grad():
        audio, audio_lens = model.encode_offline(feats.to(device), lens.to(device))
        strategy.begin_offline(requests, audio, audio_lens)
        outs = []
        while strategy.has_pending():
            outs += strategy.advance(StepBudget.unlimited())
    return strategy, {o.request_id: o for o in outs}


def test_seeded_sampling_is_reproducible_whatever_the_batch(loaded):
    feats, lens = _features(4)
    sampled = [DecodingOptions(temperature=1.5, top_k=20, top_p=0.9, seed=s) for s in (5, 6)]
    _, alone = _run(loaded, sampled, feats[:2], lens[:2])
    _, mixed = _run(loaded, [*sampled, None, DecodingOptions(temperature=1.0, seed=9)],
                    feats, lens)
    for i in range(2):
        assert mixed[f"r{i}"].token_ids == alone[f"r{i}"].token_ids
    _, greedy = _run(loaded, [None, None], feats[:2], lens[:2])
    assert any(alone[f"r{i}"].token_ids != greedy[f"r{i}"].token_ids for i in range(2))


def test_top_k_one_samples_the_greedy_tokens(loaded):
    feats, lens = _features(2)
    _, greedy = _run(loaded, [None, None], feats, lens)
    _, top1 = _run(loaded, [DecodingOptions(temperature=2.0, top_k=1, seed=s) for s in (1, 2)],
                   feats, lens)
    assert [o.token_ids for o in top1.values()] == [o.token_ids for o in greedy.values()]


def test_partials_stream_every_token_and_add_up_to_the_text(loaded):
    feats, lens = _features(3)
    strategy, outs = _run(loaded, [None] * 3, feats, lens, stream_partials=True)
    partials = strategy.take_partials()
    assert strategy.take_partials() == []
    for rid, out in outs.items():
        mine = [p for p in partials if p.request_id == rid]
        assert [t for p in mine for t in p.token_ids] == out.token_ids
        assert len([p for p in mine if not p.final]) == len(out.token_ids)  # one per step (CPU)
        assert mine[-1].final
        assert "".join(p.text for p in mine).strip() == out.text


def test_partials_are_off_by_default(loaded):
    feats, lens = _features(1)
    strategy, _ = _run(loaded, [None], feats, lens)
    assert strategy.take_partials() == []


def test_options_it_cannot_serve_are_refused(loaded):
    strategy = LlmDecodeStrategy(loaded.model, LlmOptions(), tokenizer=loaded.tokenizer)
    for d in (DecodingOptions(n_best=2), DecodingOptions(task="translate"),
              DecodingOptions(language="en"), DecodingOptions(timestamps=True),
              DecodingOptions(word_timestamps=True), DecodingOptions(repetition_penalty=1.2),
              DecodingOptions(no_repeat_ngram_size=2), DecodingOptions(prefix="a"),
              DecodingOptions(hotwords="a"), DecodingOptions(suppress_tokens=[5]),
              DecodingOptions(patience=2.0)):
        with pytest.raises(ValueError):
            strategy.validate_options(d)
    with pytest.raises(ValueError, match="best_of > 1 is not served"):
        strategy.validate_options(DecodingOptions(temperature=0.5, best_of=2))
    strategy.validate_options(DecodingOptions(prompt="t1"))
    strategy.validate_options(DecodingOptions(best_of=5))  # greedy: best_of unused


def test_a_group_prefilled_later_merges_and_decodes_the_same(loaded):
    feats, lens = _features(4)
    _, together = _run(loaded, [None] * 4, feats, lens, max_new=8)
    model = loaded.model
    strategy = LlmDecodeStrategy(model, LlmOptions(), tokenizer=loaded.tokenizer,
                                 engine_config=EngineConfig(max_new_tokens=8, kv_storage="paged"))
    outs = []
    with torch.no_grad():
        for half in (slice(0, 2), slice(2, 4)):
            reqs = [Request(f"r{i}", feats.new_zeros(160).numpy(), DecodingOptions())
                    for i in range(half.start, half.stop)]
            audio, audio_lens = model.encode_offline(feats[half], lens[half])
            strategy.begin_offline(reqs, audio, audio_lens)
            outs += strategy.advance(StepBudget.for_tick(3, 1e6))
        assert len(strategy.groups) == 1  # the second micro-batch was absorbed
        while strategy.has_pending():
            outs += strategy.advance(StepBudget.unlimited())
    # Rows of the second batch joined mid-generation; each row's tokens are its own.
    assert {o.request_id: o.token_ids for o in outs} == {
        k: o.token_ids for k, o in together.items()}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_step_graphs_replay_the_eager_tokens_on_cuda(loaded):
    feats, lens = _features(4)
    strategy, graphs = _run(loaded, [None] * 4, feats, lens, max_new=12, device="cuda")
    assert strategy.kv_storage == "paged" and strategy.step_graphs is not None
    assert strategy.step_graphs.stats["replays"] > 0
    _, eager = _run(loaded, [None] * 4, feats, lens, max_new=12, device="cuda",
                    kv_storage="paged", use_step_graphs=False)
    assert {k: o.token_ids for k, o in graphs.items()} == {
        k: o.token_ids for k, o in eager.items()}
    loaded.model.to("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bf16_paged_kernel_steps_replayed_equal_eager_on_cuda(loaded):
    """A head_dim the fused paged-decode kernel serves (64), GQA 4/2, left-padded rows of
    different prompt widths, bf16: replayed graphs give the eager paged tokens exactly."""
    from oasr.models.loader import LoadedModel
    from oasr.models.qwen2_audio.config import Qwen2AudioConfig
    from oasr.models.qwen2_audio.model import Qwen2AudioModel

    base = loaded.model.config
    cfg = Qwen2AudioConfig(**{**base.to_dict(), "hidden_size": 256, "intermediate_size": 256,
                              "num_attention_heads": 4, "num_key_value_heads": 2})
    torch.manual_seed(0)
    model = Qwen2AudioModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.3)
    twin = LoadedModel(model=model.to("cuda", torch.bfloat16).eval(),
                       tokenizer=loaded.tokenizer, feature_config=loaded.feature_config,
                       name="bf16")
    feats, lens = _features(4)
    feats = feats.to(torch.bfloat16)
    strategy, graphs = _run(twin, [None] * 4, feats, lens, max_new=20, device="cuda")
    assert strategy.kv_storage == "paged" and strategy.step_graphs.stats["replays"] > 0
    eager_strategy, eager = _run(twin, [None] * 4, feats, lens, max_new=20, device="cuda",
                                 kv_storage="paged", use_step_graphs=False)
    assert eager_strategy.kv_storage == "paged" and eager_strategy.step_graphs is None
    assert {k: o.token_ids for k, o in graphs.items()} == {
        k: o.token_ids for k, o in eager.items()}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kv_storage", ["dense", "paged"])
def test_sampled_and_greedy_steps_do_not_sync_on_cuda(loaded, kv_storage):
    """Between two reads of the end flags a step issues no host synchronisation, sampled rows
    (temperature, top-k, top-p, seeded) included."""
    feats, lens = _features(4)
    model = loaded.model.to("cuda")
    strategy = LlmDecodeStrategy(
        model, LlmOptions(eos_check_interval=1000, use_step_graphs=False),
        tokenizer=loaded.tokenizer,
        engine_config=EngineConfig(max_new_tokens=32, kv_storage=kv_storage))
    decodings = [DecodingOptions(temperature=1.2, top_k=10, top_p=0.9, seed=3), None,
                 DecodingOptions(temperature=0.8, seed=4), None]
    requests = [Request(f"r{i}", feats.new_zeros(160).numpy(), d or DecodingOptions())
                for i, d in enumerate(decodings)]
    try:
        with torch.no_grad():
            audio, audio_lens = model.encode_offline(feats.cuda(), lens.cuda())
            strategy.begin_offline(requests, audio, audio_lens)
            strategy.advance(StepBudget.for_tick(2, 1e6))  # warm-up (allocator, kernels)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                strategy.advance(StepBudget.for_tick(8, 1e6))
            finally:
                torch.cuda.set_sync_debug_mode(0)
    finally:
        loaded.model.to("cpu")


class _PaddedHead(torch.nn.Module):
    """The head of a checkpoint whose embedding is padded past its tokenizer: eight more
    outputs, each above every real logit (what random or untrained padded rows can do)."""

    def __init__(self, head: torch.nn.Module, pad: int = 8) -> None:
        super().__init__()
        self.head, self.pad = head, pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x)
        top = logits.amax(-1, keepdim=True) + 10.0
        return torch.cat([logits, top.expand(*logits.shape[:-1], self.pad)], dim=-1)


def test_rows_past_the_tokenizer_are_never_generated(loaded):
    feats, lens = _features(4)
    _, plain = _run(loaded, [None] * 4, feats, lens)
    decoder = loaded.model.decoder
    head = decoder.lm_head
    decoder.lm_head = _PaddedHead(head)
    try:
        strategy, padded = _run(loaded, [None] * 4, feats, lens)
    finally:
        decoder.lm_head = head
    assert strategy._decodable == loaded.tokenizer.vocab_size
    for rid, out in plain.items():
        assert padded[rid].token_ids == out.token_ids
        assert padded[rid].text == out.text
