"""The methods: each layer's quantized forward equals the method's forward_native."""

from __future__ import annotations

import pytest
import torch

from oasr import ops
from oasr.layers.linear import Linear, LinearActivation
from oasr.quantization import QUANT_METHODS, QuantizationSpec
from oasr.quantization.methods import QuantizationUnavailable


def _quantized(method: str, lane: str | None = None, activation: str | None = "gelu"):
    torch.manual_seed(0)
    layer = (LinearActivation(48, 40, activation) if activation else Linear(48, 40)).eval()
    spec = QuantizationSpec(method=method, lane=lane)
    m = QUANT_METHODS.get(method)(spec, "cpu")
    m.create_weights(layer, layer.weight.detach())
    layer.quant_method = m
    return layer, m


CASES = [("int8", None), ("int8", "int-mm"), ("int8-weight", None)]


@pytest.mark.parametrize("method,lane", CASES)
@pytest.mark.parametrize("activation", [None, "gelu", "relu"])
def test_forward_equals_forward_native(method, lane, activation):
    layer, m = _quantized(method, lane, activation)
    x = torch.randn(3, 7, 48)
    torch.testing.assert_close(layer(x), m.forward_native(layer, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method,lane", CASES)
def test_quantized_forward_is_close_to_the_float_layer(method, lane):
    torch.manual_seed(0)
    ref = Linear(48, 40)
    layer, _ = _quantized(method, lane, activation=None)
    layer.bias.data.copy_(ref.bias.data)
    x = torch.randn(10, 48)
    with torch.no_grad():
        want = torch.nn.functional.linear(x, ref.weight, ref.bias)
    err = (layer(x) - want).abs().max() / want.abs().max()
    assert err < 0.02, err


def test_the_float_weight_is_gone_and_the_buffers_hold_the_quantized_one():
    layer, _ = _quantized("int8")
    assert "weight" not in dict(layer.named_parameters())
    state = layer.state_dict()
    assert state["qweight"].dtype == torch.int8 and state["weight_scale"].shape == (40,)


def test_a_quantized_call_is_counted_by_method_and_lane():
    layer, _ = _quantized("int8", "int-mm")
    base = ops.snapshot()
    layer(torch.randn(2, 48))
    assert ops.counts_since(base) == {("quantized", "int8:int-mm"): 1}


def test_empty_input_gives_an_empty_output():
    layer, _ = _quantized("int8")
    assert layer(torch.randn(0, 48)).shape == (0, 40)


def test_the_cpu_picks_fbgemm_and_fp8_refuses_it_naming_the_fix():
    assert QUANT_METHODS.get("int8")(QuantizationSpec("int8"), "cpu").lane_name == "fbgemm"
    with pytest.raises(QuantizationUnavailable, match="use --quantization int8 on the CPU"):
        QUANT_METHODS.get("fp8")(QuantizationSpec("fp8"), "cpu")


def test_a_lane_of_another_method_is_refused():
    with pytest.raises(ValueError, match="lane 'scaled-mm' serves fp8, not int8"):
        QUANT_METHODS.get("int8")(QuantizationSpec("int8", lane="scaled-mm"), "cpu")
    with pytest.raises(ValueError, match="computes without a lane"):
        QUANT_METHODS.get("int8-weight")(QuantizationSpec("int8-weight", lane="fbgemm"), "cpu")


def test_offline_fp8_quantizes_weights_anywhere_but_does_not_run():
    torch.manual_seed(0)
    layer = Linear(32, 16)
    m = QUANT_METHODS.get("fp8")(QuantizationSpec("fp8"), "cpu", offline=True)
    m.create_weights(layer, layer.weight.detach())
    layer.quant_method = m
    assert layer.qweight.dtype == torch.float8_e4m3fn
    with pytest.raises(RuntimeError, match="load the checkpoint to run it"):
        layer(torch.randn(2, 32))


def test_fp8_forward_native_is_the_lanes_arithmetic():
    layer = Linear(32, 16)
    m = QUANT_METHODS.get("fp8")(QuantizationSpec("fp8"), "cpu", offline=True)
    m.create_weights(layer, layer.weight.detach())
    x = torch.randn(4, 32)
    from oasr.quantization.lanes import ScaledMMFp8Lane

    lane = ScaledMMFp8Lane()
    lane.prepare(layer)
    ref = m.forward_native(layer, x)
    torch.testing.assert_close(ScaledMMFp8Lane.scaled_mm(layer, x), ref, rtol=1e-2,
                               atol=1e-2 * ref.abs().max().item())
