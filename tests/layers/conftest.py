"""Shared fixtures of the layer tests."""

from __future__ import annotations

import pytest

from oasr import ops


@pytest.fixture(autouse=True)
def _oasr_backend():
    """Each test starts on the oasr backend with zeroed routing counts."""
    ops.reset_counts()
    ops.set_backend("oasr")
    yield
    ops.set_backend(None)
    ops.reset_counts()
