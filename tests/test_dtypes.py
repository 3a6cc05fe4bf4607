"""One table of dtype names, shared by the engine and the converters."""

from __future__ import annotations

import pytest
import torch

from oasr.dtypes import DTYPE_NAMES, dtype_from_name
from oasr.engine.config import EngineConfig
from oasr.models.converter import _as_dtype


def test_every_name_resolves_the_same_everywhere():
    for name in DTYPE_NAMES:
        want = dtype_from_name(name)
        assert isinstance(want, torch.dtype) and want.is_floating_point
        assert EngineConfig(dtype=name).resolve_dtype("cpu") is want
        assert _as_dtype(name) is want


def test_unknown_names_are_refused_listing_the_valid_ones():
    with pytest.raises(ValueError, match="valid: auto, fp32"):
        EngineConfig(dtype="fp8").resolve_dtype("cpu")
    with pytest.raises(ValueError, match="unknown dtype 'int8'; valid: fp32"):
        _as_dtype("int8")
    assert EngineConfig(dtype="auto").resolve_dtype("cpu") is torch.float32
