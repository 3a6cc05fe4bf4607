"""Qwen2-Audio, end to end: the transformers 5 folders under ``tests/fixtures/qwen2_audio/``
(``save_pretrained`` of the model and of its processor; ``make.py``) through ``oasr convert``
and ``oasr transcribe`` with default flags, against transformers' documented recipe on the same
clips (the processor's chat template, feature extractor and batch_decode; ``generate`` under
the saved generation config): text and token ids equal, the cap from
``generation_config.json``."""

from __future__ import annotations

import json

import pytest

from tests.helpers.upstream_e2e import (
    DEVICES,
    FIXTURES,
    assert_matches,
    convert_fixture,
    load_expected,
    transcribe,
)

EXPECTED = load_expected("qwen2_audio")


@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
@pytest.mark.parametrize("device", DEVICES)
def test_convert_and_transcribe_equal_transformers(variant, device, tmp_path, monkeypatch):
    src = FIXTURES / "qwen2_audio" / variant
    bundle, converted = convert_fixture(src, tmp_path, monkeypatch, device)
    assert "qwen2_audio/hf" in converted
    cap = json.loads((src / "generation_config.json").read_text())["max_new_tokens"]
    saved = json.loads((bundle / "oasr_config.json").read_text())
    assert saved["decoding_defaults"]["max_new_tokens"] == cap
    rows = transcribe(bundle, tmp_path, device=device)
    expected = EXPECTED["variants"][variant]["greedy"]
    assert_matches(expected, rows)
    for clip, e in expected.items():
        assert rows[clip]["finish_reason"] == ("length" if len(e["token_ids"]) == cap
                                               else "stop")
