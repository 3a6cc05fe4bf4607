"""FunASR Paraformer, end to end: the ModelScope folders under
``tests/fixtures/funasr_paraformer/`` (written by FunASR 1.4.16's own classes, ``make.py``)
through ``oasr convert`` and ``oasr transcribe`` with default flags, against FunASR's
``AutoModel.generate`` on the same clips (its front end, CIF, decoder, tokenizer and sentence
post-processing): text and token ids equal."""

from __future__ import annotations

import pytest

from tests.helpers.upstream_e2e import (
    FIXTURES,
    assert_matches,
    convert,
    engine_token_ids,
    load_expected,
    require_audio,
    transcribe,
)

EXPECTED = load_expected("funasr_paraformer")


@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
def test_convert_and_transcribe_equal_funasr(variant, tmp_path, monkeypatch):
    require_audio()
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    assert "paraformer/funasr" in convert(FIXTURES / "funasr_paraformer" / variant, bundle)
    rows = transcribe(bundle, tmp_path)
    assert_matches(EXPECTED["variants"][variant]["greedy"], rows, engine_token_ids(bundle))
