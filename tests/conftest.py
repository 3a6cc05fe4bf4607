"""Suite-wide settings."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_language_id(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tiny random test models are English-only with low confidence: every row would load
    # whisper-base for language ID. Tests of that check turn it back on.
    monkeypatch.setenv("OASR_LANGUAGE_ID", "off")


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist each worker gets one intra-op thread (and so do the CLIs it spawns):
    # two workers at torch's default of one thread per core oversubscribe a 2-core machine.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)
