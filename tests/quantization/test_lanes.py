"""Each lane equals its own reference: the same quantized values, products in float64."""

from __future__ import annotations

import pytest
import torch

from oasr.layers.linear import Linear
from oasr.quantization import LANES
from oasr.quantization.lanes import (
    FbgemmDynamicLane,
    IntMMLane,
    ScaledMMFp8Lane,
    cpu_has_vnni,
)
from oasr.quantization.methods import replace_weight
from oasr.quantization.numerics import quantize_weight_fp8, quantize_weight_int8


def _layer(k: int, n: int, bias: bool, quantize, seed: int = 0) -> Linear:
    torch.manual_seed(seed)
    layer = Linear(k, n, bias=bias)
    q, scale = quantize(layer.weight.detach())
    replace_weight(layer, q, scale)
    return layer


def _inputs(m: int, k: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    x[:, 3] *= 20.0  # an outlier channel, as transformer activations have
    return x


@pytest.mark.parametrize("m,k,n,bias", [(1, 64, 48, True), (37, 96, 80, False),
                                        (300, 384, 200, True)])
def test_fbgemm_equals_its_reference(m, k, n, bias):
    lane = FbgemmDynamicLane()
    layer = _layer(k, n, bias, quantize_weight_int8)
    lane.prepare(layer)
    x = _inputs(m, k)
    y, ref = lane.matmul(layer, x), lane.reference(layer, x)
    # Same quantized operands, exact int32 accumulation: only the fp32 rescale differs.
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())


def test_fbgemm_reduces_range_exactly_when_the_cpu_lacks_vnni():
    assert FbgemmDynamicLane().reduce_range is (not cpu_has_vnni())


@pytest.mark.parametrize("m,k,n,bias", [(1, 64, 48, True), (37, 96, 80, False),
                                        (300, 384, 200, True)])
def test_int_mm_equals_its_reference(m, k, n, bias):
    lane = IntMMLane()
    layer = _layer(k, n, bias, quantize_weight_int8)
    lane.prepare(layer)
    x = _inputs(m, k)
    torch.testing.assert_close(lane.matmul(layer, x), lane.reference(layer, x),
                               rtol=1e-5, atol=1e-5)


def test_int_mm_quantizes_each_token_on_its_own():
    # A loud row must not coarsen a quiet one: per-token scales keep the quiet row's error
    # at its own scale.
    lane = IntMMLane()
    layer = _layer(64, 32, False, quantize_weight_int8)
    lane.prepare(layer)
    x = _inputs(2, 64)
    x[0] *= 1000.0
    quiet = lane.matmul(layer, x)[1]
    alone = lane.matmul(layer, x[1:])[0]
    torch.testing.assert_close(quiet, alone)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 5, 64])
def test_scaled_mm_kernel_call_equals_its_reference(m, dtype):
    # torch's CPU _scaled_mm takes the lane's layout and scales, so the call is checked here
    # although the lane serves CUDA only; bf16 output bounds the difference.
    layer = _layer(64, 48, True, quantize_weight_fp8)
    lane = ScaledMMFp8Lane()
    lane.prepare(layer)
    x = _inputs(m, 64).to(dtype)  # bf16: the bias in the GEMM's epilogue
    y = ScaledMMFp8Lane.scaled_mm(layer, x)
    ref = lane.reference(layer, x)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), ref.float(), rtol=1e-2,
                               atol=1e-2 * ref.float().abs().max().item())


def test_lanes_refuse_devices_they_cannot_serve_naming_the_fix():
    assert ScaledMMFp8Lane.unavailable("cpu").startswith("fp8 runs on CUDA GPUs of sm_89")
    assert "int8" in ScaledMMFp8Lane.unavailable("cpu")
    assert FbgemmDynamicLane.unavailable("cpu") is None
    assert IntMMLane.unavailable("cpu") is None
    assert "runs on the CPU" in FbgemmDynamicLane.unavailable("meta")


def test_fp8_refuses_shapes_its_gemm_cannot_take():
    lane = ScaledMMFp8Lane()
    assert lane.layer_refusal(Linear(64, 48), "cuda") is None
    assert "multiple of 16" in lane.layer_refusal(Linear(64, 50), "cuda")


def test_every_lane_is_registered_under_its_name():
    for name in LANES.names():
        assert LANES.get(name).name == name
