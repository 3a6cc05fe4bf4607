"""The shared quantization arithmetic."""

from __future__ import annotations

import torch

from oasr.quantization.numerics import (
    FP8_MAX,
    INT8_MAX,
    dequantize_weight,
    quantize_rows_fp8,
    quantize_rows_int8,
    quantize_weight_fp8,
    quantize_weight_int8,
)


def test_int8_weight_error_is_at_most_half_a_step_per_row():
    w = torch.randn(16, 40)
    w[2] *= 50.0
    w[5] = 0.0  # a dead row quantizes to zeros
    q, scale = quantize_weight_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (16,)
    assert q.abs().max() == INT8_MAX
    err = (dequantize_weight(q, scale) - w).abs()
    assert (err <= scale[:, None] / 2 + 1e-7).all()
    assert (q[5] == 0).all()


def test_fp8_weight_uses_the_whole_range_per_row():
    w = torch.randn(8, 32)
    q, scale = quantize_weight_fp8(w)
    assert torch.allclose(q.float().abs().amax(1), torch.full((8,), FP8_MAX))
    rel = ((dequantize_weight(q, scale) - w).abs() / w.abs().amax(1, keepdim=True)).max()
    assert rel < 2 ** -4  # e4m3: 3 mantissa bits


def test_row_quantization_scales_each_row():
    x = torch.randn(4, 10)
    x[1] *= 100.0
    q, s = quantize_rows_int8(x)
    assert s.shape == (4, 1)
    assert (q.abs().amax(1) == INT8_MAX).all()
    assert ((q.float() * s - x).abs() <= s / 2 + 1e-6).all()
    q8, s8 = quantize_rows_fp8(torch.zeros(2, 3))
    assert (q8.float() == 0).all() and (s8 > 0).all()
