"""Shared fixtures of the layer tests."""

from __future__ import annotations

import pytest

from oasr.layers import _backend


@pytest.fixture(autouse=True)
def _oasr_backend():
    """Each test starts on the oasr backend with zeroed routing counts."""
    _backend.reset_counts()
    _backend.set_backend("oasr")
    yield
    _backend.set_backend(None)
    _backend.reset_counts()
