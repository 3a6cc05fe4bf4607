"""Shared tokenizer fixtures: small sentencepiece models trained here, once per session.

With ``byte_fallback`` a model holds all 256 byte pieces besides the characters of its text, so
the smallest vocabulary the trainer accepts for this text is a little over 256 + characters.
"""

from __future__ import annotations

from pathlib import Path

import pytest

spm = pytest.importorskip("sentencepiece")

# English, accented Latin and CJK: the CJK characters below the coverage cut are left to byte
# fallback, so encoding them yields <0x..> pieces.
TRAINING_TEXT = "\n".join(
    [
        "the quick brown fox jumps over the lazy dog",
        "hello world this is a test of the speech recognizer",
        "façade naïve café déjà vu über straße",
        "你好世界 今天天气很好 我们去公园",
        "good morning everyone and welcome to the meeting",
    ]
    * 8
)
SP_VOCAB_SIZE = 320

# Name -> trainer arguments beyond the common ones; "default" is the model most tests use.
SP_VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "keep_whitespace": {"remove_extra_whitespaces": False},
    "no_dummy_prefix": {"add_dummy_prefix": False, "remove_extra_whitespaces": False},
    "silent_unk": {"unk_surface": ""},
}


@pytest.fixture(scope="session")
def sentencepiece_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Variant name -> ``<name>.model`` trained on ``TRAINING_TEXT`` (about 30 ms each)."""
    folder = tmp_path_factory.mktemp("sentencepiece")
    corpus = folder / "corpus.txt"
    corpus.write_text(TRAINING_TEXT, encoding="utf-8")
    models: dict[str, Path] = {}
    for name, extra in SP_VARIANTS.items():
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(folder / name),
            vocab_size=SP_VOCAB_SIZE,
            model_type="bpe",
            byte_fallback=True,
            character_coverage=0.98,
            minloglevel=2,
            **extra,
        )
        models[name] = folder / f"{name}.model"
    return models


@pytest.fixture(scope="session")
def sentencepiece_model(sentencepiece_models: dict[str, Path]) -> Path:
    return sentencepiece_models["default"]
