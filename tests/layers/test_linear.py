"""Linear, LinearActivation and PointwiseConv1d against float64 formulas and torch layers.

Oracles: the formulas written here; ``torch.nn.Linear`` and ``torch.nn.Conv1d(k=1)``
checkpoints and outputs.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr import ops
from oasr.layers.linear import (
    ColumnParallelLinear,
    Linear,
    LinearActivation,
    PointwiseConv1d,
    RowParallelLinear,
)
from tests.helpers.routing import patch_routing
from tests.layers.reference import ACT64, affine64, strided_inputs

TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 5e-2)}


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("n_in,n_out,bias", [(1, 3, True), (3, 1, False), (17, 129, True),
                                             (129, 17, False)])
def test_linear_matches_formula(n_in, n_out, bias, dtype):
    rtol, atol = TOLERANCES[dtype]
    lin = Linear(n_in, n_out, bias=bias, dtype=dtype)
    assert lin.weight.shape == (n_out, n_in)
    assert (lin.bias is None) == (not bias)
    for x in strided_inputs(n_in, dtype):
        y = lin(x)
        assert y.shape == (*x.shape[:-1], n_out) and y.dtype == dtype
        torch.testing.assert_close(y.double(), affine64(x, lin), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("activation", list(ACT64))
def test_linear_activation_matches_formula(activation, dtype):
    rtol, atol = TOLERANCES[dtype]
    lin = LinearActivation(17, 129, activation, dtype=dtype)
    for x in strided_inputs(17, dtype):
        # the GEMM result is rounded to the layer dtype before the epilogue
        expected = ACT64[activation](affine64(x, lin).to(dtype).double())
        torch.testing.assert_close(lin(x).double(), expected, rtol=rtol, atol=atol)


def test_linear_activation_rejects_unknown_activation():
    with pytest.raises(ValueError, match="valid: relu, swish, gelu, gelu_tanh"):
        LinearActivation(4, 4, "tanh")


def test_gelu_and_gelu_tanh_are_distinct():
    lin = LinearActivation(17, 129, "gelu")
    tanh = LinearActivation(17, 129, "gelu_tanh")
    tanh.load_state_dict(lin.state_dict())
    x = torch.randn(4, 17) * 3
    assert not torch.equal(lin(x), tanh(x))


@pytest.mark.parametrize("cls", [Linear, ColumnParallelLinear, RowParallelLinear])
def test_loads_torch_linear_state_dict_with_identical_output(cls):
    ref = nn.Linear(17, 129)
    ours = cls(17, 129)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 34)[..., ::2]
    assert torch.equal(ours(x), ref(x))


def test_parallel_forms_name_their_shard_axis():
    assert ColumnParallelLinear.shard_dim == 0 and RowParallelLinear.shard_dim == 1


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("c_in,c_out", [(1, 3), (17, 129)])
def test_pointwise_conv1d_loads_conv1d_k1_state_dict(c_in, c_out, bias):
    conv = nn.Conv1d(c_in, c_out, kernel_size=1, bias=bias)
    ours = PointwiseConv1d(c_in, c_out, bias=bias)
    ours.load_state_dict(conv.state_dict())  # (out, in, 1) -> (out, in)
    assert torch.equal(ours.weight, conv.weight.squeeze(-1))
    x = torch.randn(2, 9, c_in)  # (B, T, C)
    y = ours(x)
    assert y.shape == (2, 9, c_out)
    expected = conv(x.transpose(1, 2)).transpose(1, 2)
    # The same products summed by another kernel (conv's bias is added after its GEMM, and
    # oneDNN's conv and the GEMM split the sum differently per thread count): rounding apart.
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(y.double(), affine64(x, ours), rtol=1e-5, atol=1e-5)


def test_linear_routes_with_its_activation(monkeypatch):
    routed = []

    def fake_select_kernel(op, *tensors, gap):
        routed.append((op, tensors, gap))
        return lambda *args: ("kernel", args)

    patch_routing(monkeypatch, fake_select_kernel)
    x = torch.randn(2, 4)
    lin = LinearActivation(4, 3, "gelu_tanh")
    assert lin(x) == ("kernel", (x, lin.weight, lin.bias, "gelu_tanh"))
    plain = Linear(4, 3, bias=False)
    assert plain(x) == ("kernel", (x, plain.weight, None, None))
    assert [(op, gap) for op, _, gap in routed] == [("linear", "gemm"), ("linear", "gemm")]


def test_quant_method_takes_over_the_forward():
    class Negate:
        def apply(self, layer, x):
            return -layer.forward_native(x)

    lin = Linear(4, 3)
    x = torch.randn(2, 4)
    expected = -lin.forward_native(x)
    lin.quant_method = Negate()
    assert torch.equal(lin(x), expected)
    assert ops.gap_counts() == {}  # the quant method, not routing, served it


def test_cuda_less_call_is_counted_out_of_scope():
    ops.reset_counts()
    x = torch.randn(2, 4)
    Linear(4, 3)(x)
    PointwiseConv1d(4, 3)(x.to(torch.bfloat16).float())
    assert ops.gap_counts() == {("out_of_scope", "linear:cpu"): 2}
    ops.set_backend("torch")
    Linear(4, 3)(x)
    assert ops.gap_counts()[("torch_backend", "linear")] == 1


def test_tied_linear_routes_over_the_tied_weight(monkeypatch):
    from oasr.layers import Embedding, TiedLinear

    emb = Embedding(11, 4)
    proj = TiedLinear(emb)
    assert (proj.in_features, proj.out_features) == (4, 11) and proj.bias is None
    assert list(proj.parameters()) == [] and proj.state_dict() == {}
    x = torch.randn(2, 3, 4)
    assert torch.equal(proj(x), torch.matmul(x, emb.weight.t()))
    assert ops.gap_counts() == {("out_of_scope", "linear:cpu"): 1}
    emb.to(torch.bfloat16)  # follows the embedding it is tied to
    assert proj.weight.dtype == torch.bfloat16 and proj.weight is emb.weight
    routed = []
    patch_routing(monkeypatch, lambda op, *t, gap: routed.append((op, gap)) or (lambda *a: a))
    assert proj(x)[1] is emb.weight and routed == [("linear", "gemm")]
