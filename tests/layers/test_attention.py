"""oasr.layers.attention.Attention against softmax(Q K^T * scale + mask) @ V, written out.

The reference builds its visibility rule per (row, query, key) in plain Python, independent of
the layer's vectorized masks, and computes in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from oasr.layers import attention as attention_mod
from oasr.layers.attention import Attention
from oasr.ops import gaps
from tests.helpers.routing import patch_routing


def _reference(q, k, v, scale, kv_lens=None, kv_starts=None, causal=False, attn_mask=None):
    b, h, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = h // hkv
    out = torch.zeros(b, h, tq, d, dtype=torch.float64)
    add = None
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        add = attn_mask.double().expand(b, h, tq, tk)
    allowed = None if attn_mask is None or add is not None else attn_mask.expand(b, h, tq, tk)
    for bi in range(b):
        for hi in range(h):
            kh = hi // group
            for i in range(tq):
                cols = []
                for j in range(tk):
                    if kv_lens is not None and j >= int(kv_lens[bi]):
                        continue
                    if kv_starts is not None and j < int(kv_starts[bi]):
                        continue
                    if causal and tq > 1 and j > i + (tk - tq):
                        continue
                    if allowed is not None and not bool(allowed[bi, hi, i, j]):
                        continue
                    if add is not None and add[bi, hi, i, j] == float("-inf"):
                        continue
                    cols.append(j)
                if not cols:
                    continue  # no visible key: the row is zero
                s = (k[bi, kh, cols].double() @ q[bi, hi, i].double()) * scale
                if add is not None:
                    s = s + add[bi, hi, i, cols]
                p = torch.softmax(s, dim=0)
                out[bi, hi, i] = p @ v[bi, kh, cols].double()
    return out


def _qkv(b, h, hkv, tq, tk, d, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    # q arrives as (B, T, H, D) from a projection and is transposed: a strided view.
    q = torch.randn(b, tq, h, d, generator=g).transpose(1, 2)
    k = torch.randn(b, hkv, tk, d, generator=g)
    v = torch.randn(b, hkv, tk, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


FP32 = {"atol": 2e-5, "rtol": 2e-5}


@pytest.mark.parametrize("hkv", [4, 2, 1])
@pytest.mark.parametrize(
    "tq,tk,causal",
    [(1, 1, False), (17, 17, False), (3, 17, False), (17, 17, True), (3, 17, True),
     (1, 17, True), (5, 3, True)],
)
def test_attention_unmasked_and_causal(hkv, tq, tk, causal):
    q, k, v = _qkv(2, 4, hkv, tq, tk, 8, seed=tq * 31 + tk)
    attn = Attention(4, 8, causal=causal)
    y = attn(q, k, v)
    assert y.shape == (2, 4, tq, 8)
    expected = _reference(q, k, v, 1 / math.sqrt(8), causal=causal)
    torch.testing.assert_close(y.double(), expected, **FP32)


@pytest.mark.parametrize("hkv", [4, 2])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", ["lens", "starts", "both"])
def test_attention_key_window(hkv, causal, window):
    b, tq, tk = 3, 5, 17
    q, k, v = _qkv(b, 4, hkv, tq, tk, 8, seed=7)
    kv_lens = torch.tensor([17, 9, 3]) if window in ("lens", "both") else None
    kv_starts = torch.tensor([0, 4, 2]) if window in ("starts", "both") else None
    attn = Attention(4, 8, scale=0.3, causal=causal)
    y = attn(q, k, v, kv_lens=kv_lens, kv_starts=kv_starts)
    expected = _reference(q, k, v, 0.3, kv_lens, kv_starts, causal)
    torch.testing.assert_close(y.double(), expected, **FP32)


def test_attention_fully_masked_rows_are_exact_zeros():
    q, k, v = _qkv(3, 4, 2, 5, 7, 8, seed=3)
    attn = Attention(4, 8)
    kv_lens = torch.tensor([0, 7, 4])
    kv_starts = torch.tensor([0, 2, 4])  # row 2: window [4, 4) is empty
    y = attn(q, k, v, kv_lens=kv_lens, kv_starts=kv_starts)
    assert not torch.isnan(y).any()
    assert (y[0] == 0).all() and (y[2] == 0).all()
    assert (y[1] != 0).any()
    torch.testing.assert_close(y.double(), _reference(q, k, v, attn.scale, kv_lens, kv_starts),
                               **FP32)
    # Causal with more queries than keys: the first Tq - Tk queries see nothing.
    q, k, v = _qkv(1, 4, 4, 6, 3, 8, seed=4)
    y = Attention(4, 8, causal=True)(q, k, v, kv_lens=torch.tensor([3]))
    assert (y[:, :, :3] == 0).all()
    assert (y[:, :, 3:] != 0).any()
    # A bool attn_mask with an empty row, and an additive one with an all -inf row.
    q, k, v = _qkv(2, 4, 4, 3, 5, 8, seed=5)
    bool_mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    bool_mask[..., 1, :] = False
    y = Attention(4, 8)(q, k, v, attn_mask=bool_mask)
    assert (y[:, :, 1] == 0).all() and (y[:, :, 0] != 0).any()
    add_mask = torch.zeros(1, 1, 3, 5)
    add_mask[..., 2, :] = float("-inf")
    y = Attention(4, 8)(q, k, v, attn_mask=add_mask)
    assert (y[:, :, 2] == 0).all() and not torch.isnan(y).any()


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_attention_attn_mask_combines_with_window_and_causal(kind):
    b, h, tq, tk = 2, 4, 5, 9
    q, k, v = _qkv(b, h, 2, tq, tk, 8, seed=11)
    g = torch.Generator().manual_seed(12)
    if kind == "bool":
        attn_mask = torch.rand(b, 1, tq, tk, generator=g) > 0.25
    else:
        attn_mask = torch.randn(1, h, tq, tk, generator=g)
        attn_mask[0, 1, 0, 3:] = float("-inf")
    kv_lens = torch.tensor([9, 6])
    attn = Attention(h, 8, causal=True)
    y = attn(q, k, v, kv_lens=kv_lens, attn_mask=attn_mask)
    expected = _reference(q, k, v, attn.scale, kv_lens, None, True, attn_mask)
    torch.testing.assert_close(y.double(), expected, **FP32)
    # attn_mask alone (no window, not causal).
    y = Attention(h, 8)(q, k, v, attn_mask=attn_mask)
    torch.testing.assert_close(
        y.double(), _reference(q, k, v, attn.scale, attn_mask=attn_mask), **FP32
    )


def test_attention_bf16_close_to_fp64_reference():
    q, k, v = _qkv(2, 4, 2, 5, 17, 16, seed=21, dtype=torch.bfloat16)
    kv_lens = torch.tensor([17, 8])
    kv_starts = torch.tensor([2, 0])
    y = Attention(4, 16, causal=True)(q, k, v, kv_lens=kv_lens, kv_starts=kv_starts)
    assert y.dtype == torch.bfloat16
    expected = _reference(q, k, v, 0.25, kv_lens, kv_starts, True)
    torch.testing.assert_close(y.double(), expected, atol=3e-2, rtol=3e-2)


def test_attention_rejects_mismatched_heads():
    q, k, v = _qkv(1, 4, 3, 2, 2, 8)
    with pytest.raises(ValueError, match="H_kv"):
        Attention(4, 8)(q, k, v)
    q, k, v = _qkv(1, 4, 4, 2, 2, 8)
    with pytest.raises(ValueError, match="heads"):
        Attention(2, 8)(q, k, v)


def test_attention_routes_through_select_kernel(monkeypatch):
    seen = []

    def fake_select(op, *tensors, gap):
        seen.append((op, gap, len(tensors)))
        return lambda q, k, v, lens, starts, mask, scale, causal: torch.full((1,), scale)

    patch_routing(monkeypatch, fake_select)
    q, k, v = _qkv(1, 2, 1, 3, 3, 4)
    assert Attention(2, 4, scale=0.5, causal=True)(q, k, v).item() == 0.5
    assert seen == [("attention", gaps.FMHA.id, 3)]


def test_attention_zeroes_empty_rows_whatever_the_sdpa_backend_returns(monkeypatch):
    """Backends differ on an all-masked row (NaN or zeros); the layer's answer must not."""
    real_sdpa = torch.nn.functional.scaled_dot_product_attention

    def nan_on_empty_rows(q, k, v, attn_mask=None, **kwargs):
        out = real_sdpa(q, k, v, attn_mask=attn_mask, **kwargs)
        if attn_mask is not None:
            empty = ~attn_mask.any(-1, keepdim=True) if attn_mask.dtype == torch.bool else (
                (attn_mask == float("-inf")).all(-1, keepdim=True))
            out = out.masked_fill(empty, float("nan"))
        return out

    monkeypatch.setattr(attention_mod.F, "scaled_dot_product_attention", nan_on_empty_rows)
    q, k, v = _qkv(2, 4, 2, 3, 5, 8, seed=31)
    y = Attention(4, 8)(q, k, v, kv_lens=torch.tensor([5, 0]))
    assert not torch.isnan(y).any()
    assert (y[1] == 0).all()
    torch.testing.assert_close(
        y.double(), _reference(q, k, v, 8 ** -0.5, torch.tensor([5, 0])), **FP32
    )
