"""Suite-wide settings."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_language_id(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tiny random test models are English-only with low confidence: every row would load
    # whisper-base for language ID. Tests of that check turn it back on.
    monkeypatch.setenv("OASR_LANGUAGE_ID", "off")
