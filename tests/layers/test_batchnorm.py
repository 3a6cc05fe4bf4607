"""BatchNorm1d (inference) against a float64 formula and torch's nn.BatchNorm1d, and its routing.

Oracles: the running-statistics formula written here in float64; ``torch.nn.BatchNorm1d`` in
eval mode on the channel-first layout (state dict and outputs).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr import ops
from oasr.layers.batchnorm import BatchNorm1d
from oasr.ops import gaps
from tests.helpers.routing import patch_routing

TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (2e-2, 3e-2),
    torch.float16: (2e-3, 3e-3),
}


def _reference64(x, mean, var, weight, bias, eps):
    y = (x.double() - mean.double()) / torch.sqrt(var.double() + eps)
    if weight is not None:
        y = y * weight.double() + bias.double()
    return y


def _torch_bn(c: int, seed: int, affine: bool = True) -> nn.BatchNorm1d:
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm1d(c, eps=1e-3, affine=affine).eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) + 0.2)
        if affine:
            bn.weight.copy_(torch.randn(c, generator=g))
            bn.bias.copy_(torch.randn(c, generator=g))
        bn.num_batches_tracked.fill_(17)
    return bn


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("c", [1, 7, 64])
def test_loads_torch_state_dict_and_matches_it_channel_last(c, affine):
    ref = _torch_bn(c, c, affine)
    ours = BatchNorm1d(c, eps=1e-3, affine=affine)
    ours.load_state_dict(ref.state_dict())  # num_batches_tracked is accepted and discarded
    assert "num_batches_tracked" not in ours.state_dict()
    x = torch.randn(3, 11, c, generator=torch.Generator().manual_seed(1))
    expected = ref(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", list(TOLERANCES))
def test_matches_formula_on_strided_and_flat_inputs(dtype):
    c = 9
    ours = BatchNorm1d(c, eps=1e-5)
    ours.load_state_dict(_torch_bn(c, 3).state_dict())
    ours.to(dtype)
    g = torch.Generator().manual_seed(2)
    inputs = [
        torch.randn(c, generator=g).to(dtype),
        torch.randn(c, 4, 5, generator=g).to(dtype).permute(1, 2, 0),  # strided last axis
        torch.randn(2, 3, 2 * c, generator=g).to(dtype)[..., ::2],
    ]
    rtol, atol = TOLERANCES[dtype]
    for x in inputs:
        y = ours(x)
        assert y.shape == x.shape and y.dtype == dtype
        expected = _reference64(x, ours.running_mean, ours.running_var, ours.weight, ours.bias,
                                ours.eps)
        torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol)


def test_rejects_the_wrong_channel_count():
    with pytest.raises(ValueError, match="over 4 channels got last axis 5"):
        BatchNorm1d(4)(torch.randn(2, 5))


def test_routes_with_the_documented_kernel_signature(monkeypatch):
    seen = []
    out = torch.full((1,), 7.0)

    def fake_select(op, *tensors, gap):
        seen.append((op, gap, tensors[0].shape))
        return lambda *args: (seen.append(args[1:]), out)[1]

    patch_routing(monkeypatch, fake_select)
    bn = BatchNorm1d(3, eps=1e-4)
    x = torch.randn(2, 3)
    assert bn(x) is out
    assert seen[0] == ("batch_norm", gaps.BATCH_NORM.id, (2, 3))
    mean, var, weight, bias, eps = seen[1]
    assert mean is bn.running_mean and var is bn.running_var
    assert weight is bn.weight and bias is bn.bias and eps == 1e-4


def test_cpu_calls_are_out_of_scope_and_the_gap_is_declared():
    BatchNorm1d(3)(torch.randn(2, 3))
    assert ops.gap_counts()[("out_of_scope", "batch_norm:cpu")] == 1
    gap = ops.KERNEL_GAPS["batch-norm"]
    assert gap.what and "oasr.layers" in gap.fix
