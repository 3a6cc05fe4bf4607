"""Qwen2-Audio against transformers' ``Qwen2AudioForConditionalGeneration``: tiny random
weights saved with ``save_pretrained``, converted with our converter.

Logits at every valid position of a left-padded batch within tolerance, and greedy tokens
identical through the ``llm`` family (paged and dense KV)."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode.llm import LlmDecodeStrategy, LlmOptions, build_prompts, splice_audio
from oasr.engine.request import DecodingOptions, Request
from oasr.engine.step_budget import StepBudget
from oasr.models.loader import load_pretrained
from oasr.models.qwen2_audio.converters import HfQwen2AudioConverter
from tests.models.qwen2_audio.checkpoint import N_MELS, SOURCE_POSITIONS, make_checkpoint

WINDOW = 2 * SOURCE_POSITIONS


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("q2a")
    hf = make_checkpoint(root / "hf")
    HfQwen2AudioConverter().convert(root / "hf", root / "bundle")
    loaded = load_pretrained(str(root / "bundle"))
    return hf, loaded


def _inputs(loaded, lens):
    torch.manual_seed(1)
    feats = torch.randn(len(lens), WINDOW, N_MELS)
    lens = torch.tensor(lens)
    return feats, lens


def _hf_masks(batch, lens):
    attn = (torch.arange(batch.ids.shape[1])[None] >= batch.starts[:, None]).long()
    feat_mask = (torch.arange(WINDOW)[None] < lens[:, None]).long()
    return attn, feat_mask


def _prompts(loaded, audio_lens, instruction=None):
    cfg, tok = loaded.model.config, loaded.tokenizer
    before, after = cfg.render_prompt(instruction)
    n = len(audio_lens)
    return build_prompts([tok.encode(before)] * n, [tok.encode(after)] * n, audio_lens,
                         cfg.audio_frames, cfg.audio_token_id, cfg.pad_token_id)


@torch.no_grad()
def test_logits_match_transformers_on_a_left_padded_batch(converted):
    hf, loaded = converted
    model = loaded.model
    feats, lens = _inputs(loaded, [40, 27, 13])
    audio, audio_lens = model.encode_offline(feats, lens)
    assert audio_lens.tolist() == [10, 7, 3]
    batch = _prompts(loaded, audio_lens.tolist())
    embeds = splice_audio(model.decoder.embed(batch.ids), audio, batch.audio_src)
    ours = model.decoder.forced_logits(embeds, batch.starts)
    attn, feat_mask = _hf_masks(batch, lens)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # generate's rule for left padding
    ref = hf(input_ids=batch.ids, attention_mask=attn, position_ids=positions,
             input_features=feats.transpose(1, 2), feature_attention_mask=feat_mask).logits
    valid = attn.bool()
    diff = (ours[valid] - ref[valid]).abs().max().item()
    assert diff < 2e-4 * ref[valid].abs().max().item() + 1e-4, diff
    assert torch.equal(ours[valid].argmax(-1), ref[valid].argmax(-1))


def _decode(loaded, feats, lens, max_new, kv_storage="auto", **opts):
    model = loaded.model
    cfg = EngineConfig(max_new_tokens=max_new, kv_storage=kv_storage)
    strategy = LlmDecodeStrategy(model, LlmOptions(**opts), tokenizer=loaded.tokenizer,
                                 engine_config=cfg)
    audio, audio_lens = model.encode_offline(feats, lens)
    requests = [Request(f"r{i}", feats.new_zeros(160).numpy(), DecodingOptions())
                for i in range(feats.shape[0])]
    strategy.begin_offline(requests, audio, audio_lens)
    outs = []
    while strategy.has_pending():
        outs += strategy.advance(StepBudget.unlimited())
    return strategy, {o.request_id: o for o in outs}


@torch.no_grad()
@pytest.mark.parametrize("kv_storage", ["dense", "paged"])
def test_greedy_tokens_match_transformers_generate(converted, kv_storage):
    hf, loaded = converted
    feats, lens = _inputs(loaded, [40, 27, 13])
    _, outs = _decode(loaded, feats, lens, max_new=12, kv_storage=kv_storage)
    cfg = loaded.model.config
    audio_lens = [10, 7, 3]
    batch = _prompts(loaded, audio_lens)
    attn, feat_mask = _hf_masks(batch, lens)
    gen = hf.generate(input_ids=batch.ids, attention_mask=attn,
                      input_features=feats.transpose(1, 2), feature_attention_mask=feat_mask,
                      max_new_tokens=12, do_sample=False, eos_token_id=cfg.eos_token_ids,
                      pad_token_id=cfg.pad_token_id)
    for i in range(3):
        ref = gen[i, batch.ids.shape[1]:].tolist()
        stop = next((k for k, t in enumerate(ref) if t in cfg.eos_token_ids), None)
        expect = ref if stop is None else ref[:stop]
        out = outs[f"r{i}"]
        assert out.token_ids == expect, (i, out.token_ids, ref)
        assert out.finish_reason == ("length" if stop is None else "stop")
        assert out.text == loaded.tokenizer.decode(expect).strip()


@torch.no_grad()
def test_a_request_prompt_changes_the_prompt_and_matches_transformers(converted):
    hf, loaded = converted
    feats, lens = _inputs(loaded, [40])
    model = loaded.model
    strategy = LlmDecodeStrategy(model, LlmOptions(llm_prompt="t1 t2"),
                                 tokenizer=loaded.tokenizer,
                                 engine_config=EngineConfig(max_new_tokens=6))
    audio, audio_lens = model.encode_offline(feats, lens)
    req = Request("a", feats.new_zeros(160).numpy(), DecodingOptions(prompt="t5 t6 t7"))
    strategy.validate_options(req.decoding)
    strategy.begin_offline([req], audio, audio_lens)
    outs = []
    while strategy.has_pending():
        outs += strategy.advance(StepBudget.unlimited())
    batch = _prompts(loaded, [10], "t5 t6 t7")
    assert batch.ids[0].tolist().count(5) == 1  # the request's words, not the engine's
    attn, feat_mask = _hf_masks(batch, lens)
    gen = hf.generate(input_ids=batch.ids, attention_mask=attn,
                      input_features=feats.transpose(1, 2), feature_attention_mask=feat_mask,
                      max_new_tokens=6, do_sample=False, eos_token_id=model.config.eos_token_ids,
                      pad_token_id=model.config.pad_token_id)
    ref = gen[0, batch.ids.shape[1]:].tolist()
    stop = next((k for k, t in enumerate(ref) if t in model.config.eos_token_ids), len(ref))
    assert outs[0].token_ids == ref[:stop]
