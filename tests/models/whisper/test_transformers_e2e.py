"""Whisper, end to end: the transformers 5 folders under ``tests/fixtures/whisper_hf/``
(``save_pretrained`` of a ``WhisperForConditionalGeneration`` and of its ``WhisperProcessor``
over the real English-only / multilingual tokenizers, openai-style generation configs;
``make.py``) through ``oasr convert`` and ``oasr transcribe`` with default flags, against
transformers' documented recipe on the same clips (processor, ``generate`` under the saved
generation config, ``batch_decode(skip_special_tokens=True)``, stripped as every oasr text):
text and token ids (the generated ids after the prompt, ``<|endoftext|>`` excluded) equal, and
every row ends at ``<|endoftext|>``. The multilingual folder's generation config leaves the
language to detection, as ``oasr transcribe`` without ``--language`` does: the detected
language is compared too.

One flag is named: ``--coverage-vad none``. By default ``oasr transcribe`` times the words of a
Whisper row and decodes again, as a second request, any stretch of detected speech no word
covers (``oasr/transcribe/coverage.py``), appending its text: a pass of oasr's own that
transformers' recipe does not have. A random model's word timings leave such stretches (seen:
the English-only variant on 1688-142285-0002 appends a repair decode of its last second), so
the comparison is of the decode itself, with that repair off; word timing still runs."""

from __future__ import annotations

import pytest

from tests.helpers.upstream_e2e import (
    DEVICES,
    FIXTURES,
    assert_matches,
    convert,
    full_fp32,
    load_expected,
    require_audio,
    transcribe,
)

EXPECTED = load_expected("whisper_hf")
OASR_ARGS = ("--coverage-vad", "none")  # no coverage repair (module docstring)


@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
@pytest.mark.parametrize("device", DEVICES)
def test_convert_and_transcribe_equal_transformers(variant, device, tmp_path, monkeypatch):
    require_audio()
    full_fp32(device, monkeypatch)
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    assert "whisper/hf" in convert(FIXTURES / "whisper_hf" / variant, bundle)
    rows = transcribe(bundle, tmp_path, *OASR_ARGS, device=device)
    expected = EXPECTED["variants"][variant]["greedy"]
    assert_matches(expected, rows)
    for clip, e in expected.items():
        # Every row stopped at <|endoftext|> in transformers (well before any cap).
        assert rows[clip]["finish_reason"] == "stop", rows[clip]
        assert rows[clip]["language"] == e["language"], (clip, rows[clip]["language"])
