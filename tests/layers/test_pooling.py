"""oasr.layers.pooling.AvgPool1d against nn.AvgPool1d run on the BCT-permuted input."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from oasr.layers.pooling import AvgPool1d
from oasr.ops import gaps
from tests.helpers.routing import patch_routing

FP32 = {"atol": 1e-6, "rtol": 1e-6}


def _cases():
    for k, stride, ceil_mode, include in itertools.product(
        (1, 2, 3, 5), (None, 1, 2, 3), (False, True), (True, False)
    ):
        for padding in range(k // 2 + 1):
            yield k, stride, padding, ceil_mode, include


def _out_len(t, k, stride, padding, ceil_mode):
    s = k if stride is None else stride
    span = t + 2 * padding - k
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= t + padding:
        n -= 1  # the last window may not start inside the right padding
    return n


@pytest.mark.parametrize("t", [1, 3, 17])
def test_avg_pool1d_matches_nn_avg_pool1d(t):
    x = torch.randn(2, t, 5, generator=torch.Generator().manual_seed(t))
    checked = 0
    for k, stride, padding, ceil_mode, include in _cases():
        if _out_len(t, k, stride, padding, ceil_mode) < 1:
            continue  # torch refuses an empty output; test_avg_pool1d_empty_output_raises
        ref = nn.AvgPool1d(k, stride, padding, ceil_mode, include)
        ours = AvgPool1d(k, stride, padding, ceil_mode, include)
        expected = ref(x.transpose(1, 2)).transpose(1, 2)
        y = ours(x)
        assert y.is_contiguous()
        torch.testing.assert_close(y, expected, **FP32, msg=f"{k=} {stride=} {padding=}")
        checked += 1
    assert checked > 50


def test_avg_pool1d_empty_output_raises():
    with pytest.raises(RuntimeError):
        nn.AvgPool1d(5)(torch.randn(1, 2, 3))
    with pytest.raises(RuntimeError):
        AvgPool1d(5)(torch.randn(1, 3, 2))


def test_avg_pool1d_known_values():
    """Hand-computable divisors: include-pad divides by k, exclude-pad by the real count."""
    x = torch.arange(1.0, 6.0).reshape(1, 5, 1)  # 1..5 over time
    incl = AvgPool1d(3, 2, padding=1, count_include_pad=True)(x).flatten()
    excl = AvgPool1d(3, 2, padding=1, count_include_pad=False)(x).flatten()
    torch.testing.assert_close(incl, torch.tensor([(0 + 1 + 2) / 3, (2 + 3 + 4) / 3, (4 + 5) / 3]))
    torch.testing.assert_close(excl, torch.tensor([(1 + 2) / 2, (2 + 3 + 4) / 3, (4 + 5) / 2]))


def test_avg_pool1d_noncontiguous_and_bf16():
    big = torch.randn(3, 34, 8, generator=torch.Generator().manual_seed(0))
    x = big[:, 1::2, ::2]
    assert not x.is_contiguous()
    ours = AvgPool1d(2, 2)
    expected = nn.AvgPool1d(2, 2)(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(ours(x), expected, **FP32)
    y = ours(x.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), expected, atol=2e-2, rtol=2e-2)


def test_avg_pool1d_rejects_oversized_padding():
    with pytest.raises(ValueError, match="padding"):
        AvgPool1d(3, padding=2)


def test_avg_pool1d_routes_through_select_kernel(monkeypatch):
    seen = []

    def fake_select(op, *tensors, gap):
        seen.append((op, gap))
        return lambda x, k, s, p, ceil, incl: torch.full((1,), float(k * 100 + s * 10 + p))

    patch_routing(monkeypatch, fake_select)
    assert AvgPool1d(3, 2, 1)(torch.randn(1, 4, 2)).item() == 321
    assert seen == [("avg_pool1d", gaps.AVG_POOL1D.id)]
