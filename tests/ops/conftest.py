"""Shared fixtures of the dispatch tests: a clean backend, counts, kernel and route registry."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from oasr import ops
from oasr.ops import dispatch


@dataclass
class FakeCudaTensor:
    """Stands in for a CUDA tensor: routing reads only these attributes."""

    dtype: torch.dtype = torch.float16
    is_cuda: bool = True
    device: str = "cuda:0"


# The process's own registries, for a test that needs the real kernels and routes.
_REAL_KERNELS, _REAL_ROUTES = dispatch._KERNELS, dispatch._ROUTES


@pytest.fixture
def real_registry(monkeypatch):
    monkeypatch.setattr(dispatch, "_KERNELS", _REAL_KERNELS)
    monkeypatch.setattr(dispatch, "_ROUTES", _REAL_ROUTES)


@pytest.fixture(autouse=True)
def _clean_dispatch(monkeypatch):
    """Each test starts on the oasr backend, zero counts, no kernels and no routes."""
    monkeypatch.setattr(dispatch, "_KERNELS", {})
    monkeypatch.setattr(dispatch, "_ROUTES", {})
    ops.set_backend("oasr")
    ops.reset_counts()
    yield
    ops.set_backend(None)
    ops.reset_counts()
