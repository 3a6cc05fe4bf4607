"""oasr.layers.softmax against the formula exp(s - max) * keep / sum, computed in float64."""

from __future__ import annotations

import pytest
import torch

from oasr.layers.softmax import MaskedSoftmax, masked_softmax
from oasr.ops import gaps
from tests.helpers.routing import patch_routing


def _reference(scores, bias, mask_a, mask_b, dim=-1):
    s = scores.double()
    if bias is not None:
        s = s + bias.double()
    keep = torch.ones_like(s, dtype=torch.bool)
    for m in (mask_a, mask_b):
        if m is not None:
            keep = keep & m.expand_as(s)
    s = s.moveaxis(dim, -1)
    keep = keep.moveaxis(dim, -1)
    out = torch.zeros_like(s)
    flat_s, flat_k, flat_o = s.reshape(-1, s.shape[-1]), keep.reshape(-1, s.shape[-1]), out.view(
        -1, s.shape[-1])
    for r in range(flat_s.shape[0]):
        idx = flat_k[r].nonzero().flatten()
        if idx.numel() == 0:
            continue  # a fully masked row stays zero
        v = flat_s[r, idx]
        e = torch.exp(v - v.max())
        flat_o[r, idx] = e / e.sum()
    return out.moveaxis(-1, dim)


def _inputs(seed=0, b=2, h=3, tq=5, tk=17):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, h, tq, tk, generator=g) * 3
    bias = torch.randn(1, h, tq, tk, generator=g)
    lens = torch.tensor([tk, 4])[:b]
    key_pad = (torch.arange(tk)[None, :] < lens[:, None])[:, None, None, :]  # (B, 1, 1, Tk)
    chunk = torch.rand(1, 1, tq, tk, generator=g) > 0.3  # (1, 1, Tq, Tk)
    chunk[0, 0, 2] = False  # one query row fully masked
    return scores, bias, key_pad, chunk


@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("masks", ["none", "a", "b", "both"])
def test_masked_softmax_matches_formula(use_bias, masks):
    scores, bias, key_pad, chunk = _inputs()
    bias = bias if use_bias else None
    mask_a = key_pad if masks in ("a", "both") else None
    mask_b = chunk if masks in ("b", "both") else None
    y = masked_softmax(scores, bias, mask_a, mask_b)
    torch.testing.assert_close(y.double(), _reference(scores, bias, mask_a, mask_b),
                               atol=1e-6, rtol=1e-6)


def test_fully_masked_rows_are_exact_zeros():
    scores, bias, key_pad, chunk = _inputs()
    y = masked_softmax(scores, bias, key_pad, chunk)
    assert not torch.isnan(y).any()
    assert (y[:, :, 2] == 0).all()  # the chunk mask's empty row
    # Every other row sums to 1 wherever anything is kept.
    kept = (key_pad & chunk).any(-1).expand(2, 3, 5)
    torch.testing.assert_close(y.sum(-1)[kept], torch.ones(int(kept.sum())))
    all_masked = masked_softmax(scores, mask_a=torch.zeros(1, 1, 1, 17, dtype=torch.bool))
    assert (all_masked == 0).all()


def test_masked_softmax_other_dim_and_module():
    scores, bias, key_pad, _ = _inputs(seed=1)
    s = scores.transpose(-1, -2)  # softmax over dim -2, non-contiguous
    m = key_pad.transpose(-1, -2)
    y = MaskedSoftmax(dim=-2)(s, bias.transpose(-1, -2), m)
    torch.testing.assert_close(
        y.double(), _reference(s, bias.transpose(-1, -2), m, None, dim=-2), atol=1e-6, rtol=1e-6
    )
    torch.testing.assert_close(MaskedSoftmax(dim=-2).forward_native(s, None, m), masked_softmax(
        s, None, m, None, dim=-2))


def test_masked_softmax_bf16():
    scores, bias, key_pad, chunk = _inputs(seed=2)
    y = masked_softmax(scores.bfloat16(), bias.bfloat16(), key_pad, chunk)
    assert y.dtype == torch.bfloat16
    assert (y[:, :, 2] == 0).all()
    torch.testing.assert_close(
        y.double(), _reference(scores.bfloat16(), bias.bfloat16(), key_pad, chunk),
        atol=1e-2, rtol=2e-2,
    )


def test_masked_softmax_rejects_non_bool_masks():
    scores, _, key_pad, _ = _inputs()
    with pytest.raises(TypeError, match="bool"):
        masked_softmax(scores, mask_a=key_pad.float())


def test_masked_softmax_routes_through_select_kernel(monkeypatch):
    seen = []

    def fake_select(op, *tensors, gap):
        seen.append((op, gap, tensors[0].shape))
        return lambda s, b, ma, mb, dim: torch.full((1,), float(dim))

    patch_routing(monkeypatch, fake_select)
    scores = torch.randn(2, 3)
    assert masked_softmax(scores, dim=0).item() == 0
    assert MaskedSoftmax(dim=1)(scores).item() == 1
    assert seen == [("masked_softmax", gaps.MASKED_SOFTMAX.id, (2, 3))] * 2
