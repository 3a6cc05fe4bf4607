"""Parakeet CTC / RNN-T / TDT, end to end: the transformers 5 folders under
``tests/fixtures/parakeet/`` (``save_pretrained`` of the model and of its processor, a
SentencePiece tokenizer converted by transformers' own ``ParakeetConverter``; ``make.py``)
through ``oasr convert`` and ``oasr transcribe`` with default flags, against transformers'
documented recipe on the same clips (processor, ``generate``, ``batch_decode``): text and token
ids equal. The same models as ``.nemo`` archives (NeMo's layout, from which transformers'
conversion writes those folders) convert and transcribe to the same outputs."""

from __future__ import annotations

import pytest

from tests.helpers.upstream_e2e import (
    DEVICES,
    FIXTURES,
    assert_matches,
    convert_fixture,
    load_expected,
    transcribe,
)

EXPECTED = load_expected("parakeet")


@pytest.mark.parametrize("layout", ["huggingface", "nemo"])
@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
@pytest.mark.parametrize("device", DEVICES)
def test_convert_and_transcribe_equal_transformers(variant, layout, device, tmp_path,
                                                    monkeypatch):
    head = variant.split("_")[0]
    src = FIXTURES / "parakeet" / (variant if layout == "huggingface" else f"{variant}.nemo")
    bundle, converted = convert_fixture(src, tmp_path, monkeypatch, device)
    assert f"parakeet_{head}/{layout}" in converted
    rows = transcribe(bundle, tmp_path, device=device)
    assert_matches(EXPECTED["variants"][variant]["greedy"], rows)
