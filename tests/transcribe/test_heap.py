"""The glibc mmap threshold is pinned, unless the user set their own."""

from __future__ import annotations

import sys

import pytest

from oasr.transcribe.heap import pin_mmap_threshold


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_threshold_is_pinned_on_glibc() -> None:
    assert pin_mmap_threshold() is True


def test_a_users_own_threshold_is_left_alone(monkeypatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert pin_mmap_threshold() is False
