"""FunASR Paraformer, end to end: the ModelScope folders under
``tests/fixtures/funasr_paraformer/`` (written by FunASR 1.4.16's own classes, ``make.py``)
through ``oasr convert`` and ``oasr transcribe`` with default flags, against FunASR's
``AutoModel.generate`` on the same clips (its front end, CIF, decoder, tokenizer and sentence
post-processing): text and token ids equal."""

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

EXPECTED = load_expected("funasr_paraformer")


@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
@pytest.mark.parametrize("device", DEVICES)
def test_convert_and_transcribe_equal_funasr(variant, device, tmp_path, monkeypatch):
    bundle, converted = convert_fixture(FIXTURES / "funasr_paraformer" / variant, tmp_path,
                                        monkeypatch, device)
    assert "paraformer/funasr" in converted
    rows = transcribe(bundle, tmp_path, device=device)
    assert_matches(EXPECTED["variants"][variant]["greedy"], rows)
