"""Tiny random Whisper models shared by the aed tests (dense and paged)."""

from __future__ import annotations

import pytest

from tests.helpers.tiny_whisper import TinyWhisper, build_tiny_whisper


@pytest.fixture(scope="module")
def tiny() -> TinyWhisper:
    """Rows run to their cap, mostly by looping."""
    return build_tiny_whisper(seed=1, with_hf=False)


@pytest.fixture(scope="module")
def tiny_eos() -> TinyWhisper:
    """Rows end at input-dependent lengths (a mix of "stop" and "length")."""
    return build_tiny_whisper(seed=0, with_hf=False)
