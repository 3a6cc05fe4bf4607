"""The quantization axis' three registries: populated, consistent, loud."""

from __future__ import annotations

import pytest

from oasr.quantization import (
    LANES,
    METHOD_NAMES,
    QUANT_ALGORITHMS,
    QUANT_METHODS,
    QuantMethod,
    ScaledMMLane,
    register_lane,
)
from oasr.quantization.spec import ALGORITHM_NAMES
from oasr.registry import DuplicateNameError, UnknownNameError


def test_the_spelled_names_are_the_registered_ones():
    assert sorted(METHOD_NAMES) == QUANT_METHODS.names()
    assert sorted(ALGORITHM_NAMES) == QUANT_ALGORITHMS.names()


def test_every_method_names_registered_lanes_that_serve_it():
    for name, cls in QUANT_METHODS.items():
        assert issubclass(cls, QuantMethod) and cls.name == name
        assert cls.module_types
        for lane in cls.lanes:
            assert LANES.get(lane).method == name, (name, lane)


def test_every_lane_serves_a_registered_method_and_says_how_it_quantizes():
    for name, cls in LANES.items():
        assert issubclass(cls, ScaledMMLane) and cls.name == name
        assert cls.method in QUANT_METHODS and cls.activations in ("token", "tensor")
        assert name in QUANT_METHODS.get(cls.method).lanes


def test_errors_are_loud():
    with pytest.raises(UnknownNameError, match="unknown scaled-mm lane 'x'; valid: fbgemm"):
        LANES.get("x")
    with pytest.raises(DuplicateNameError):
        register_lane("fbgemm")(ScaledMMLane)
