"""FeedForward and GatedMLP against float64 formulas and upstream module layouts.

Oracles: the formulas written here; a WeNet/ESPnet-layout PositionwiseFeedForward built from
torch layers in this file; HF ``Qwen2MLP``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr import ops
from oasr.layers.ffn import FeedForward, GatedMLP
from tests.helpers.routing import patch_routing
from tests.layers.reference import ACT64, affine64, strided_inputs

TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (5e-2, 5e-2)}


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("activation", list(ACT64))
@pytest.mark.parametrize("dim,hidden,bias", [(1, 3, True), (17, 129, False), (129, 17, True)])
def test_feed_forward_matches_formula(dim, hidden, bias, activation, dtype):
    rtol, atol = TOLERANCES[dtype]
    ff = FeedForward(dim, hidden, activation, bias=bias, dtype=dtype)
    for x in strided_inputs(dim, dtype):
        y = ff(x)
        assert y.shape == x.shape and y.dtype == dtype
        # the hidden activation is rounded to the layer dtype between the two GEMMs
        h = ACT64[activation](affine64(x, ff.w_1)).to(dtype)
        torch.testing.assert_close(y.double(), affine64(h, ff.w_2), rtol=rtol, atol=atol)
        assert torch.equal(ff.forward_native(x), y)


class _WenetPositionwiseFeedForward(nn.Module):
    """The WeNet / ESPnet layout: w_1, activation, dropout, w_2."""

    def __init__(self, dim: int, hidden: int, activation: nn.Module) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.activation = activation
        self.dropout = nn.Dropout(0.1)
        self.w_2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


@pytest.mark.parametrize("activation,torch_act", [("relu", nn.ReLU()), ("swish", nn.SiLU())])
def test_feed_forward_loads_wenet_layout_with_identical_output(activation, torch_act):
    ref = _WenetPositionwiseFeedForward(17, 129, torch_act).eval()
    ours = FeedForward(17, 129, activation)
    assert set(ours.state_dict()) == {"w_1.weight", "w_1.bias", "w_2.weight", "w_2.bias"}
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 9, 17)
    assert torch.equal(ours(x), ref(x))


def _gated64(x, mlp, activation):
    gated = ACT64[activation](affine64(x, mlp.gate_proj)).to(x.dtype).double()
    up = affine64(x, mlp.up_proj).to(x.dtype).double()
    return affine64((gated * up).to(x.dtype), mlp.down_proj)


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("activation", list(ACT64))
@pytest.mark.parametrize("dim,hidden,bias", [(1, 3, False), (17, 129, True), (129, 17, False)])
def test_gated_mlp_matches_formula(dim, hidden, bias, activation, dtype):
    rtol, atol = TOLERANCES[dtype]
    mlp = GatedMLP(dim, hidden, activation, bias=bias, dtype=dtype)
    for x in strided_inputs(dim, dtype):
        y = mlp(x)
        assert y.shape == x.shape and y.dtype == dtype
        torch.testing.assert_close(y.double(), _gated64(x, mlp, activation), rtol=rtol,
                                   atol=atol)
        assert torch.equal(mlp.forward_native(x), y)


@pytest.mark.parametrize("hidden_act", ["silu", "gelu_pytorch_tanh"])
def test_gated_mlp_loads_hf_qwen2_mlp_with_identical_output(hidden_act):
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP

    config = Qwen2Config(hidden_size=17, intermediate_size=129, hidden_act=hidden_act)
    ref = Qwen2MLP(config)
    ours = GatedMLP(17, 129, activation=hidden_act)
    assert set(ours.state_dict()) == {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 9, 34)[..., ::2]
    assert torch.equal(ours(x), ref(x))


def test_unknown_activation_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: relu, swish, gelu, gelu_tanh, silu"):
        GatedMLP(4, 8, activation="swooshl")
    with pytest.raises(ValueError, match="unknown activation"):
        FeedForward(4, 8, activation="tanh")


def test_gated_mlp_offers_gate_up_to_one_kernel_then_runs_down_proj(monkeypatch):
    routed = []
    fused = torch.randn(2, 8)

    def fake_select_kernel(op, *tensors, gap):
        routed.append((op, tensors, gap))

        def kernel(*args):
            routed.append(args)
            return fused

        return kernel

    patch_routing(monkeypatch, fake_select_kernel, only=("gated_mlp",))
    mlp = GatedMLP(4, 8, activation="silu", bias=True)
    x = torch.randn(2, 4)
    y = mlp(x)
    (op, tensors, gap), args = routed
    assert (op, gap) == ("gated_mlp", "gemm") and tensors[0] is x
    g, u = mlp.gate_proj, mlp.up_proj
    assert args[0] is x and args[1:5] == (g.weight, g.bias, u.weight, u.bias)
    assert args[5] == "swish"
    assert torch.equal(y, mlp.down_proj.forward_native(fused))


def test_quantized_gate_skips_the_fused_kernel(monkeypatch):
    def refuse(op, *tensors, gap):
        raise AssertionError("a quantized GatedMLP must not offer its float weights")

    patch_routing(monkeypatch, refuse, only=("gated_mlp",))

    class DoubleQuant:
        def apply(self, layer, x):
            return 2 * layer.forward_native(x)

    mlp = GatedMLP(4, 8)
    mlp.gate_proj.quant_method = DoubleQuant()
    x = torch.randn(3, 4)
    expected = mlp.down_proj(2 * mlp.gate_proj.forward_native(x) * mlp.up_proj(x))
    assert torch.equal(mlp(x), expected)


def test_cpu_calls_are_counted_out_of_scope():
    GatedMLP(4, 8)(torch.randn(2, 4))
    FeedForward(4, 8)(torch.randn(2, 4))
    assert ops.gap_counts() == {("out_of_scope", "gated_mlp:cpu"): 1,
                                     ("out_of_scope", "linear:cpu"): 5}
