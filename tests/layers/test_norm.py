"""Norms against float64 formulas, torch / HF checkpoints, and routing.

Oracles: the formulas written here; ``torch.nn.LayerNorm`` (state_dict and outputs);
HF ``Qwen2RMSNorm`` (state_dict and outputs).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr import ops
from oasr.layers.norm import (
    ESPNET_EPS,
    QWEN2_RMS_EPS,
    TORCH_EPS,
    BiasNorm,
    LayerNorm,
    RMSNorm,
)
from tests.helpers.routing import patch_routing

SIZES = (1, 3, 17, 129)
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (2e-2, 3e-2),
    torch.float16: (2e-3, 3e-3),
}


def _layer_norm64(x, weight, bias, eps):
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def _rms_norm64(x, weight, eps):
    x = x.double()
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * weight.double()


def _bias_norm64(x, bias, log_scale, channel_dim):
    x = x.double()
    shape = [1] * x.dim()
    shape[channel_dim] = -1
    centered = x - bias.double().reshape(shape)
    rms = torch.sqrt((centered**2).mean(channel_dim, keepdim=True))
    return x * torch.exp(log_scale.double()) / rms


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p.dim() else 0.3))
    return module


def _inputs(c: int, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(c)
    return [
        (torch.randn(1, c, generator=g) * 3 + 1).to(dtype),
        (torch.randn(c, 3, 5, generator=g) * 3 + 1).to(dtype).permute(1, 2, 0),  # C strided
        (torch.randn(4, 2 * c, generator=g) * 3 + 1).to(dtype)[:, ::2],  # sliced
    ]


def test_eps_constants():
    assert (TORCH_EPS, ESPNET_EPS, QWEN2_RMS_EPS) == (1e-5, 1e-12, 1e-6)
    assert LayerNorm(4).eps == TORCH_EPS and RMSNorm(4).eps == QWEN2_RMS_EPS


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("c", SIZES)
def test_layer_norm_matches_formula(c, dtype):
    rtol, atol = TOLERANCES[dtype]
    ln = _randomize(LayerNorm(c), c).to(dtype)
    for x in _inputs(c, dtype):
        y = ln(x)
        assert y.dtype == dtype and y.shape == x.shape
        expected = _layer_norm64(x, ln.weight, ln.bias, ln.eps)
        torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol)


def test_layer_norm_eps_is_the_one_passed():
    # Tiny rows: the variance (~1e-10) is far below 1e-5 and far above 1e-12.
    x = 1e-5 * torch.randn(3, 17)
    for eps in (TORCH_EPS, ESPNET_EPS):
        ln = LayerNorm(17, eps=eps)
        torch.testing.assert_close(ln(x).double(), _layer_norm64(x, None, None, eps),
                                   rtol=1e-3, atol=1e-3)
    assert not torch.allclose(LayerNorm(17, eps=TORCH_EPS)(x), LayerNorm(17, eps=ESPNET_EPS)(x))


@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("c", (3, 129))
def test_layer_norm_loads_torch_state_dict_with_identical_output(c, affine, bias):
    ref = _randomize(nn.LayerNorm(c, eps=ESPNET_EPS, elementwise_affine=affine, bias=bias), 7)
    ours = LayerNorm(c, eps=ESPNET_EPS, elementwise_affine=affine, bias=bias)
    ours.load_state_dict(ref.state_dict())  # strict: same keys, same shapes
    assert set(ours.state_dict()) == set(ref.state_dict())
    x = torch.randn(2, 5, 2 * c)[..., ::2]
    assert torch.equal(ours(x), ref(x))


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("c", SIZES)
def test_rms_norm_matches_formula(c, dtype):
    rtol, atol = TOLERANCES[dtype]
    rms = _randomize(RMSNorm(c), c).to(dtype)
    for x in _inputs(c, dtype):
        y = rms(x)
        assert y.dtype == dtype and y.shape == x.shape
        torch.testing.assert_close(y.double(), _rms_norm64(x, rms.weight, rms.eps),
                                   rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_matches_hf_qwen2(dtype):
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    ref = _randomize(Qwen2RMSNorm(129, eps=QWEN2_RMS_EPS), 3).to(dtype)
    ours = RMSNorm(129, eps=QWEN2_RMS_EPS, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    x = (torch.randn(3, 7, 129) * 4).to(dtype)
    assert torch.equal(ours(x), ref(x))


def test_rms_norm_fp32_weight_promotes_half_input_like_hf():
    rms = _randomize(RMSNorm(17), 1)
    x = torch.randn(2, 17, dtype=torch.bfloat16)
    y = rms(x)
    assert y.dtype == torch.float32
    normalized = (x.double() / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + rms.eps))
    # the normalized value is rounded to bf16 before the fp32 weight multiplies it
    expected = normalized.to(torch.bfloat16).double() * rms.weight.double()
    torch.testing.assert_close(y.double(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("c", SIZES[1:])  # one channel is exactly its bias at init: rms 0
def test_bias_norm_matches_formula(c, dtype):
    rtol, atol = TOLERANCES[dtype]
    bn = _randomize(BiasNorm(c), c).to(dtype)
    assert bn.log_scale.shape == () and bn.bias.shape == (c,)
    for x in _inputs(c, dtype):
        y = bn(x)
        assert y.dtype == dtype and y.shape == x.shape
        expected = _bias_norm64(x, bn.bias, bn.log_scale, -1)
        torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol)


def test_bias_norm_channel_dim_1_on_bct():
    bn = _randomize(BiasNorm(17, channel_dim=1), 5)
    x = torch.randn(2, 9, 17).transpose(1, 2)  # (B, C, T), strided
    expected = _bias_norm64(x, bn.bias, bn.log_scale, 1)
    torch.testing.assert_close(bn(x).double(), expected, rtol=1e-5, atol=1e-5)
    # the bias enters the rms only: each output frame is x's frame rescaled, never rotated
    y = bn(x)
    cos = torch.nn.functional.cosine_similarity(y, x, dim=1)
    torch.testing.assert_close(cos, torch.ones_like(cos))


class _Recorder:
    """Stands in for ``select_kernel``: records the routing call, returns a fake kernel."""

    def __init__(self, result) -> None:
        self.routed: list[tuple[str, tuple[torch.Tensor, ...], str]] = []
        self.kernel_args: list[tuple[object, ...]] = []
        self.result = result

    def __call__(self, op, *tensors, gap):
        self.routed.append((op, tensors, gap))

        def kernel(*args):
            self.kernel_args.append(args)
            return self.result

        return kernel


def test_norms_route_with_the_documented_kernel_signatures(monkeypatch):
    rec = _Recorder(result="y")
    patch_routing(monkeypatch, rec)
    x = torch.randn(2, 5)
    ln, rms, bn = LayerNorm(5, eps=ESPNET_EPS), RMSNorm(5), BiasNorm(5)
    assert ln(x) == "y" and rms(x) == "y" and bn(x) == "y"
    assert [(op, gap) for op, _, gap in rec.routed] == [
        ("layer_norm", "norm"), ("rms_norm", "norm"), ("bias_norm", "norm"),
    ]
    args = rec.kernel_args
    assert args[0][0] is x and args[0][1:] == (ln.weight, ln.bias, ESPNET_EPS)
    assert args[1][1:] == (rms.weight, QWEN2_RMS_EPS)
    assert args[2][1:] == (bn.bias, bn.log_scale, -1)


def test_cpu_norm_calls_are_counted_out_of_scope():
    x = torch.randn(2, 5)
    LayerNorm(5)(x)
    RMSNorm(5)(x)
    counts = ops.gap_counts()
    assert counts == {("out_of_scope", "layer_norm:cpu"): 1,
                      ("out_of_scope", "rms_norm:cpu"): 1}
