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
the comparison is of the decode itself, with that repair off; word timing still runs.

Two decodes are compared (``DECODES``): ``greedy`` (``generate`` as the generation config
saves it; ``oasr transcribe`` with default flags) and ``beam4`` (``generate(num_beams=4,
length_penalty=0.0, early_stopping=True)``; ``--beam-size 4 --length-penalty 0``). Those two
beam settings are the ones under which transformers' beam search is the one ``oasr`` runs
(openai-whisper's, with CTranslate2's stopping rule: four finished hypotheses end it, at
``--patience`` 1.0); with ``generate``'s defaults (``length_penalty=1.0``,
``early_stopping=False``) transformers keeps searching after four finished, a stopping rule
``oasr`` does not have: that decode is recorded (``beam4_generate_defaults``) and not compared,
``make.py``'s docstring shows where and why it differs. The beam decode runs on the CPU only
for now: its CUDA run awaits a device round."""

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

EXPECTED = load_expected("whisper_hf")
OASR_ARGS = ("--coverage-vad", "none")  # no coverage repair (module docstring)
# Decode -> (generate's keyword arguments it was recorded with, the oasr flags that ask for the
# same search, the devices it is compared on).
DECODES = {
    "greedy": ({}, (), DEVICES),
    # CPU only: its CUDA run awaits a device round.
    "beam4": ({"num_beams": 4, "length_penalty": 0.0, "early_stopping": True},
              ("--beam-size", "4", "--length-penalty", "0"), ("cpu",)),
}
# Recorded, not compared: transformers' default beam stopping rule (module docstring).
NOT_COMPARED = ("beam4_generate_defaults",)


def _cases():
    for variant in sorted(EXPECTED["variants"]):
        for decode, (_, _, devices) in DECODES.items():
            for device in devices:
                if isinstance(device, str):
                    yield pytest.param(variant, decode, device)
                else:  # DEVICES' gpu-marked CUDA entry
                    yield pytest.param(variant, decode, *device.values, marks=device.marks)


def test_every_recorded_decode_is_compared_or_named():
    assert set(EXPECTED["upstream"]["generate"]) == set(DECODES) | set(NOT_COMPARED)
    for variant, decodes in EXPECTED["variants"].items():
        assert set(decodes) == set(DECODES) | set(NOT_COMPARED), variant


@pytest.mark.parametrize(("variant", "decode", "device"), list(_cases()))
def test_convert_and_transcribe_equal_transformers(variant, decode, device, tmp_path,
                                                   monkeypatch):
    kwargs, flags, _ = DECODES[decode]
    # The flags ask for the search the recording ran (make.py's DECODES).
    assert EXPECTED["upstream"]["generate"][decode] == kwargs
    bundle, converted = convert_fixture(FIXTURES / "whisper_hf" / variant, tmp_path,
                                        monkeypatch, device)
    assert "whisper/hf" in converted
    rows = transcribe(bundle, tmp_path, *OASR_ARGS, *flags, device=device)
    expected = EXPECTED["variants"][variant][decode]
    assert_matches(expected, rows)
    for clip, e in expected.items():
        # Every row stopped at <|endoftext|> in transformers (well before any cap).
        assert rows[clip]["finish_reason"] == "stop", rows[clip]
        assert rows[clip]["language"] == e["language"], (clip, rows[clip]["language"])
