"""oasr.layers.conv against torch's own nn.Conv1d / nn.Conv2d run on the permuted layout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import conv as conv_mod
from oasr.layers.conv import Conv1d, Conv2d, Conv2dActivation, DepthwiseConv1d
from oasr.layers.quantizable import QuantizableConv
from oasr.ops import gaps
from tests.helpers.routing import patch_routing

FP32 = {"atol": 1e-5, "rtol": 1e-5}
BF16 = {"atol": 6e-2, "rtol": 6e-2}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- Conv1d -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cin,cout,k,stride,padding,dilation,groups,t",
    [
        (1, 1, 1, 1, 0, 1, 1, 1),
        (3, 5, 3, 1, 1, 1, 1, 17),
        (4, 6, 3, 2, 1, 1, 2, 17),
        (6, 6, 5, 1, 4, 2, 3, 3),
        (17, 3, 1, 3, 0, 1, 1, 17),
        (8, 8, 3, 1, 0, 1, 8, 5),
    ],
)
def test_conv1d_matches_nn_conv1d(cin, cout, k, stride, padding, dilation, groups, t):
    ref = nn.Conv1d(cin, cout, k, stride, padding, dilation, groups)
    ours = Conv1d(cin, cout, k, stride, padding, dilation, groups)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, t, cin, generator=_gen(0))
    y = ours(x)
    expected = ref(x.transpose(1, 2)).transpose(1, 2)
    assert y.shape == expected.shape
    assert y.is_contiguous()
    torch.testing.assert_close(y, expected, **FP32)


def test_conv1d_asymmetric_padding_is_a_causal_conv():
    ref = nn.Conv1d(4, 5, 3, bias=True)
    ours = Conv1d(4, 5, 3, padding=(2, 0))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 17, 4, generator=_gen(1))
    expected = ref(F.pad(x.transpose(1, 2), (2, 0))).transpose(1, 2)
    y = ours(x)
    assert y.shape == (3, 17, 5)
    torch.testing.assert_close(y, expected, **FP32)
    # Causal: frame t must not depend on frames after t.
    x2 = x.clone()
    x2[:, 10:] = torch.randn(3, 7, 4, generator=_gen(2))
    torch.testing.assert_close(ours(x2)[:, :10], y[:, :10], **FP32)


def test_conv1d_strided_input_and_no_bias():
    ref = nn.Conv1d(3, 4, 3, padding=1, bias=False)
    ours = Conv1d(3, 4, 3, padding=1, bias=False)
    ours.load_state_dict(ref.state_dict())
    assert ours.bias is None
    big = torch.randn(2, 34, 7, generator=_gen(3))
    x = big[:, ::2, 1:4]  # non-contiguous (B, T, C) view
    assert not x.is_contiguous()
    torch.testing.assert_close(ours(x), ref(x.transpose(1, 2)).transpose(1, 2), **FP32)


def test_conv1d_bf16_close_to_fp32_reference():
    ref = nn.Conv1d(8, 6, 3, padding=1)
    ours = Conv1d(8, 6, 3, padding=1)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 17, 8, generator=_gen(4))
    y = ours.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref(x.transpose(1, 2)).transpose(1, 2), **BF16)


def test_conv1d_rejects_bad_groups_and_padding():
    with pytest.raises(ValueError, match="divisible"):
        Conv1d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding"):
        Conv1d(3, 4, 3, padding=(-1, 0))


def test_convs_are_quantizable_and_quant_method_takes_over():
    c1, c2 = Conv1d(2, 2, 1), Conv2d(2, 2, 1)
    assert isinstance(c1, QuantizableConv) and isinstance(c2, QuantizableConv)

    class Doubler:
        def apply(self, layer, x):
            return 2 * layer.forward_native(x)

    x1 = torch.randn(1, 3, 2, generator=_gen(5))
    x2 = torch.randn(1, 3, 3, 2, generator=_gen(6))
    c1.quant_method = Doubler()
    c2.quant_method = Doubler()
    torch.testing.assert_close(c1(x1), 2 * c1.forward_native(x1))
    torch.testing.assert_close(c2(x2), 2 * c2.forward_native(x2))


# --- DepthwiseConv1d ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "c,k,padding,t",
    [(1, 1, 0, 1), (3, 3, 1, 17), (5, 5, (4, 0), 17), (4, 7, (2, 4), 3), (3, 3, (0, 2), 17)],
)
def test_depthwise_matches_grouped_nn_conv1d(c, k, padding, t):
    left, right = (padding, padding) if isinstance(padding, int) else padding
    ref = nn.Conv1d(c, c, k, groups=c)
    ours = DepthwiseConv1d(c, k, padding=padding)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, t, c, generator=_gen(7))
    expected = ref(F.pad(x.transpose(1, 2), (left, right))).transpose(1, 2)
    y = ours(x)
    assert y.shape == (2, t + left + right - (k - 1), c)
    torch.testing.assert_close(y, expected, **FP32)


def test_depthwise_dilation():
    ref = nn.Conv1d(3, 3, 3, dilation=2, groups=3, bias=False)
    ours = DepthwiseConv1d(3, 3, padding=(4, 0), bias=False, dilation=2)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 17, 3, generator=_gen(8))
    expected = ref(F.pad(x.transpose(1, 2), (4, 0))).transpose(1, 2)
    torch.testing.assert_close(ours(x), expected, **FP32)


def _lengths_mask(lengths: list[int], t: int) -> torch.Tensor:
    return torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]


def test_depthwise_mask_zeroes_padded_frames_before_the_conv():
    c, k, t = 4, 5, 17
    ref = nn.Conv1d(c, c, k, groups=c)
    ours = DepthwiseConv1d(c, k, padding=(2, 2))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, t, c, generator=_gen(9))
    mask = _lengths_mask([17, 9, 1], t)
    expected = ref(F.pad((x * mask[..., None]).transpose(1, 2), (2, 2))).transpose(1, 2)
    torch.testing.assert_close(ours(x, mask), expected, **FP32)
    # Garbage in padded frames must not reach valid frames.
    x2 = torch.where(mask[..., None], x, torch.full_like(x, 1e3))
    torch.testing.assert_close(ours(x2, mask), expected, **FP32)


def test_depthwise_fsmn_masked_residual():
    """FunASR's FSMN memory block: inputs = x * m; out = (conv(pad(inputs)) + inputs) * m."""
    c, k, t = 6, 11, 17
    left, right = 5, 5
    ref = nn.Conv1d(c, c, k, groups=c, bias=False)
    ours = DepthwiseConv1d(c, k, padding=(left, right), bias=False)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, t, c, generator=_gen(10))
    mask = _lengths_mask([17, 12, 3], t)
    m = mask[..., None].float()
    inputs = x * m
    expected = (ref(F.pad(inputs.transpose(1, 2), (left, right))).transpose(1, 2) + inputs) * m
    y = ours(x, mask, residual=x, mask_output=True)
    torch.testing.assert_close(y, expected, **FP32)
    assert (y[~mask] == 0).all()
    # Float (B, 1, T) masks, as FunASR passes them, give the same result.
    y_float = ours(x, mask[:, None, :].float(), residual=x, mask_output=True)
    torch.testing.assert_close(y_float, expected, **FP32)


def test_depthwise_residual_without_mask():
    ref = nn.Conv1d(3, 3, 3, padding=1, groups=3)
    ours = DepthwiseConv1d(3, 3, padding=1)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 17, 3, generator=_gen(11))
    r = torch.randn(2, 17, 3, generator=_gen(12))
    expected = ref(x.transpose(1, 2)).transpose(1, 2) + r
    torch.testing.assert_close(ours(x, residual=r), expected, **FP32)


def test_depthwise_rejects_mask_of_wrong_size():
    dw = DepthwiseConv1d(3, 3, padding=1)
    with pytest.raises(ValueError, match="mask"):
        dw(torch.randn(2, 5, 3), torch.ones(2, 4, dtype=torch.bool))


def test_depthwise_bf16_close_to_fp32_reference():
    ref = nn.Conv1d(8, 8, 5, groups=8)
    ours = DepthwiseConv1d(8, 5, padding=(4, 0))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 17, 8, generator=_gen(13))
    mask = _lengths_mask([17, 6], 17)
    expected = ref(F.pad((x * mask[..., None]).transpose(1, 2), (4, 0))).transpose(1, 2) + x
    y = ours.to(torch.bfloat16)(x.bfloat16(), mask, residual=x.bfloat16())
    torch.testing.assert_close(y.float(), expected, **BF16)


# --- Conv2d -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cin,cout,k,stride,padding,groups,hw",
    [
        (1, 1, 1, 1, 0, 1, (1, 1)),
        (1, 8, 3, 2, 0, 1, (17, 9)),
        (3, 6, (3, 5), (2, 1), (1, 2), 1, (17, 3)),
        (6, 6, 3, 1, 1, 6, (5, 17)),
        (4, 6, 3, (1, 2), 0, 2, (9, 17)),
        (5, 7, 1, 1, 0, 1, (3, 17)),
    ],
)
def test_conv2d_nhwc_matches_nn_conv2d(cin, cout, k, stride, padding, groups, hw):
    ref = nn.Conv2d(cin, cout, k, stride, padding, groups=groups)
    ours = Conv2d(cin, cout, k, stride, padding, groups=groups)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, *hw, cin, generator=_gen(14))
    y = ours(x)
    expected = ref(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
    assert y.shape == expected.shape
    assert y.is_contiguous()
    torch.testing.assert_close(y, expected, **FP32)


def test_conv2d_dilation_and_noncontiguous_input():
    ref = nn.Conv2d(3, 4, 3, padding=2, dilation=2, bias=False)
    ours = Conv2d(3, 4, 3, padding=2, dilation=2, bias=False)
    ours.load_state_dict(ref.state_dict())
    nchw = torch.randn(2, 3, 17, 9, generator=_gen(15))
    x = nchw.transpose(1, 3).transpose(1, 2)  # (B, H, W, C) view of NCHW memory
    assert not x.is_contiguous()
    torch.testing.assert_close(ours(x), ref(nchw).permute(0, 2, 3, 1), **FP32)


def test_conv2d_bf16_close_to_fp32_reference():
    ref = nn.Conv2d(4, 8, 3, stride=2)
    ours = Conv2d(4, 8, 3, stride=2)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 17, 9, 4, generator=_gen(16))
    y = ours.to(torch.bfloat16)(x.bfloat16())
    torch.testing.assert_close(y.float(), ref(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1), **BF16)


@pytest.mark.parametrize(
    "activation,fn", [("relu", F.relu), ("swish", F.silu), ("gelu", F.gelu)]
)
def test_conv2d_activation(activation, fn):
    ref = nn.Conv2d(3, 5, 3, stride=2, padding=1)
    ours = Conv2dActivation(3, 5, 3, stride=2, padding=1, activation=activation)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 17, 9, 3, generator=_gen(17))
    expected = fn(ref(x.permute(0, 3, 1, 2))).permute(0, 2, 3, 1)
    torch.testing.assert_close(ours(x), expected, **FP32)


def test_conv2d_activation_rejects_unknown():
    with pytest.raises(ValueError, match="activation"):
        Conv2dActivation(3, 5, 3, activation="tanh-ish")


# --- routing ------------------------------------------------------------------------------


def test_forward_routes_through_select_kernel(monkeypatch):
    """A kernel returned by select_kernel serves the call with the layer's own arguments."""
    calls: list[tuple[str, str]] = []

    def fake_select(op, *tensors, gap):
        calls.append((op, gap))
        if op == "conv1d":
            return lambda x, w, b, stride, pad, dil, groups: conv_mod._conv1d_btc(
                x, w, b, stride, pad, dil, groups) + 1
        if op == "depthwise_conv1d":
            return lambda x, w, b, pad, dil, mask, res, mask_out: torch.zeros(())
        return lambda x, w, b, stride, pad, dil, groups, act: torch.ones(())

    patch_routing(monkeypatch, fake_select)
    c1 = Conv1d(3, 4, 3, padding=(2, 0))
    x = torch.randn(2, 5, 3, generator=_gen(18))
    torch.testing.assert_close(c1(x), c1.forward_native(x) + 1)
    assert DepthwiseConv1d(3, 3)(x).item() == 0
    assert Conv2dActivation(3, 4, 1, activation="relu")(torch.randn(1, 2, 2, 3)).item() == 1
    assert calls == [
        ("conv1d", gaps.CONV1D.id),
        ("depthwise_conv1d", gaps.CONV1D.id),
        ("conv2d", gaps.CONV2D.id),
    ]


def test_glu_delegates_to_activation_module():
    activation = pytest.importorskip("oasr.layers.activation")
    if not hasattr(activation, "glu"):
        pytest.skip("oasr.layers.activation.glu is not written yet")
    x = torch.randn(2, 6, 8, generator=_gen(19))
    torch.testing.assert_close(conv_mod.glu(x, dim=-1), F.glu(x, dim=-1))
    torch.testing.assert_close(conv_mod.glu(x, dim=1), F.glu(x, dim=1))
