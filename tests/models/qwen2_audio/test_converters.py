"""``HfQwen2AudioConverter``: both key layouts, tied embeddings, and what it refuses."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from oasr.models.loader import load_pretrained
from oasr.models.qwen2_audio.converters import HfQwen2AudioConverter, map_key
from oasr.models.registry import detect_converter
from tests.models.qwen2_audio.checkpoint import SPECIALS, make_checkpoint


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    hf = make_checkpoint(root / "hf")
    return hf, root / "hf"


def test_detected_and_the_ids_come_from_the_checkpoint(hub):
    _, folder = hub
    conv = detect_converter(folder)
    assert isinstance(conv, HfQwen2AudioConverter)
    cfg = conv.build_config(folder)
    assert cfg.audio_token_id == SPECIALS["<|AUDIO|>"]
    assert set(cfg.eos_token_ids) == {SPECIALS["<|im_end|>"], SPECIALS["<|endoftext|>"]}
    assert cfg.pad_token_id == SPECIALS["<|endoftext|>"]
    assert cfg.num_key_value_heads == 2 and cfg.rms_norm_eps == 1e-6


def test_the_in_memory_layout_converts_to_the_same_weights(hub, tmp_path):
    from safetensors.torch import save_file

    hf, folder = hub
    mem = tmp_path / "mem"
    shutil.copytree(folder, mem)
    (mem / "model.safetensors").unlink()
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    assert any(k.startswith("model.language_model.") for k in state)  # transformers 5 names
    save_file(state, str(mem / "model.safetensors"))
    conv = HfQwen2AudioConverter()
    a = conv.load_state_dict(folder, conv.build_config(folder))
    b = conv.load_state_dict(mem, conv.build_config(mem))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_map_key_covers_both_layouts():
    assert map_key("language_model.model.norm.weight") == "decoder.norm.weight"
    assert map_key("model.language_model.norm.weight") == "decoder.norm.weight"
    assert map_key("language_model.lm_head.weight") == "decoder.lm_head.weight"
    assert map_key("lm_head.weight") == "decoder.lm_head.weight"
    assert map_key("model.audio_tower.conv1.weight") == "encoder.conv1.weight"
    assert map_key("something.else") is None


@torch.no_grad()
def test_the_text_configs_tie_flag_leaves_the_head_its_own_as_transformers_does(tmp_path):
    hf = make_checkpoint(tmp_path / "hf", tie=True)
    assert hf.lm_head.weight.data_ptr() != hf.model.language_model.embed_tokens.weight.data_ptr()
    HfQwen2AudioConverter().convert(tmp_path / "hf", tmp_path / "bundle")
    model = load_pretrained(str(tmp_path / "bundle")).model
    assert not model.config.tie_word_embeddings
    ids = torch.tensor([[1, 2, 3, 4]])
    starts = torch.zeros(1, dtype=torch.long)
    ours = model.decoder.forced_logits(model.decoder.embed(ids), starts)
    ref = hf(input_ids=ids).logits
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["text_config"].update(use_sliding_window=True), "sliding-window"),
    (lambda c: c["text_config"].update(hidden_act="gelu"), "silu"),
    (lambda c: c["audio_config"].update(scale_embedding=True), "scale_embedding"),
])
def test_what_the_model_does_not_implement_is_refused(hub, tmp_path, edit, message):
    _, folder = hub
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    cfg = json.loads((bad / "config.json").read_text())
    edit(cfg)
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=message):
        HfQwen2AudioConverter().build_config(bad)


def test_a_tokenizer_without_the_chatml_markers_is_refused(hub, tmp_path):
    _, folder = hub
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    tok = json.loads((bad / "tokenizer.json").read_text())
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] != "<|im_start|>"]
    (bad / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match="im_start"):
        HfQwen2AudioConverter().build_config(bad)
