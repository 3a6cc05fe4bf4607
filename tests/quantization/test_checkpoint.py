"""Which spec an engine applies: the checkpoint's, else the request's."""

from __future__ import annotations

import pytest
import torch

from oasr.quantization import QuantizationSpec
from oasr.quantization.checkpoint import (
    RecordedQuantization,
    dequantize_state,
    engine_quantization,
)
from oasr.quantization.numerics import quantize_weight_int8

RECORDED = RecordedQuantization(QuantizationSpec("int8", lane="fbgemm", layers=("a",)),
                                {"a": torch.ones(3)})


def test_a_float_checkpoint_follows_the_request():
    assert engine_quantization(None, None) == (None, None)
    spec, smoothing = engine_quantization("int8", None)
    assert spec.method == "int8" and smoothing is None


def test_a_quantized_checkpoint_is_applied_with_its_lane_chosen_again():
    spec, smoothing = engine_quantization(None, RECORDED)
    assert spec.method == "int8" and spec.lane is None and spec.layers == ("a",)
    assert smoothing is RECORDED.smoothing
    assert engine_quantization("int8", RECORDED)[0].layers == ("a",)


def test_none_runs_the_dequantized_weights_and_another_method_is_refused():
    assert engine_quantization("none", RECORDED) == (None, None)
    with pytest.raises(ValueError, match="quantized int8; --quantization fp8 cannot"):
        engine_quantization("fp8", RECORDED)


def test_dequantize_state_restores_the_unsmoothed_weight():
    w = torch.randn(4, 3)
    factor = torch.tensor([2.0, 0.5, 1.0])
    q, scale = quantize_weight_int8(w * factor)
    state = {"a.qweight": q, "a.weight_scale": scale, "a.input_smooth": 1.0 / factor,
             "a.bias": torch.zeros(4)}
    spec = QuantizationSpec("int8", layers=("a",)).to_dict()
    out, recorded = dequantize_state(state, spec, {"a.weight", "a.bias"})
    assert set(out) == {"a.weight", "a.bias"}
    torch.testing.assert_close(out["a.weight"], w, atol=scale.max().item(), rtol=0)
    torch.testing.assert_close(recorded.smoothing["a"], factor)
    with pytest.raises(ValueError, match="holds no b.qweight"):
        dequantize_state(state, QuantizationSpec("int8", layers=("b",)).to_dict(), set())
