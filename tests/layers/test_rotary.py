"""Rotary embeddings against transformers' Qwen2 rotary and float64 rotation formulas.

Oracles: ``Qwen2RotaryEmbedding`` / ``apply_rotary_pos_emb`` from
``transformers.models.qwen2.modeling_qwen2``; the pairwise rotation written here in float64.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config
from transformers.models.qwen2 import modeling_qwen2 as hf

from oasr import ops
from oasr.layers.rotary import NeoxRotaryEmbedding, apply_rotary_pos_emb
from tests.helpers.routing import patch_routing


def _hf_rotary(head_dim: int, base: float) -> hf.Qwen2RotaryEmbedding:
    heads = 3
    config = Qwen2Config(hidden_size=heads * head_dim, num_attention_heads=heads,
                         max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    return hf.Qwen2RotaryEmbedding(config)


def _angles64(positions: torch.Tensor, head_dim: int, base: float) -> torch.Tensor:
    """theta[..., t, i] = p_t * base^(-2i/D): (..., T, D/2) float64."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return positions.double()[..., None] * base ** (-2.0 * i / head_dim)


def _rotate_pairs64(x, angles, first, second):
    """Rotate (x[first], x[second]) by ``angles``; the two index sets pair dimensions."""
    x = x.double()
    cos, sin = angles.cos(), angles.sin()
    out = torch.empty_like(x)
    a, b = x[..., first], x[..., second]
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out


def _positions() -> torch.Tensor:
    # per-row positions, e.g. left padding: rows start at different offsets
    return torch.stack([torch.arange(17), torch.arange(17) + 5, torch.arange(17).flip(0)])


@pytest.mark.parametrize("head_dim,base", [(2, 10000.0), (34, 10000.0), (128, 1e6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_neox_cos_sin_match_hf_qwen2(head_dim, base, dtype):
    ours = NeoxRotaryEmbedding(head_dim, max_position=64, base=base)
    ref = _hf_rotary(head_dim, base)
    torch.testing.assert_close(ours.inv_freq, ref.inv_freq, rtol=0, atol=0)
    x = torch.empty(1, dtype=dtype)
    for positions in (_positions(), torch.arange(3), torch.tensor([[0]])):
        cos, sin = ours(positions, dtype=dtype)
        ref_cos, ref_sin = ref(x, positions)
        assert cos.shape == (*positions.shape, head_dim) and cos.dtype == dtype
        torch.testing.assert_close(cos, ref_cos, rtol=0, atol=1e-6)
        torch.testing.assert_close(sin, ref_sin, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2),
                                       (torch.float16, 3e-3)])
@pytest.mark.parametrize("head_dim", [2, 34])
def test_apply_rotary_pos_emb_matches_hf_and_formula(head_dim, dtype, tol):
    positions = _positions()  # (B=3, T=17)
    cos, sin = NeoxRotaryEmbedding(head_dim)(positions, dtype=dtype)
    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(3, 17, 4, head_dim, generator=g).to(dtype).transpose(1, 2)  # (B, H, T, D)
    k = torch.randn(3, 1, 17, 2 * head_dim, generator=g).to(dtype)[..., ::2]  # GQA, sliced
    q_out, k_out = apply_rotary_pos_emb(q, k, cos, sin)
    q_ref, k_ref = hf.apply_rotary_pos_emb(q, k, cos, sin)
    assert torch.equal(q_out, q_ref) and torch.equal(k_out, k_ref)
    half = head_dim // 2
    first, second = list(range(half)), list(range(half, head_dim))
    angles = _angles64(positions, head_dim, 10000.0)[:, None]  # (B, 1, T, D/2)
    torch.testing.assert_close(q_out.double(), _rotate_pairs64(q, angles, first, second),
                               rtol=tol, atol=tol)
    torch.testing.assert_close(k_out.double(), _rotate_pairs64(k, angles, first, second),
                               rtol=tol, atol=tol)
    # (B, T, H, D) layout with unsqueeze_dim=2
    q_bthd, k_bthd = q.transpose(1, 2), k.transpose(1, 2)
    q2, k2 = apply_rotary_pos_emb(q_bthd, k_bthd, cos, sin, unsqueeze_dim=2)
    ref2 = hf.apply_rotary_pos_emb(q_bthd, k_bthd, cos, sin, unsqueeze_dim=2)
    assert torch.equal(q2, ref2[0]) and torch.equal(k2, ref2[1])


@pytest.mark.parametrize("cast", [lambda m: m.half(), lambda m: m.to(torch.bfloat16)])
def test_tables_stay_fp32_and_out_of_the_state_dict(cast):
    neox = NeoxRotaryEmbedding(34, base=1e6)
    fresh_inv = neox.inv_freq.clone()
    cast(neox)
    assert neox.inv_freq.dtype == torch.float32 and torch.equal(neox.inv_freq, fresh_inv)
    assert not neox.state_dict()


def test_odd_head_dim_is_refused():
    with pytest.raises(ValueError, match="positive and even"):
        NeoxRotaryEmbedding(33)


def test_rotation_routes_with_the_documented_kernel_signature(monkeypatch):
    routed = []

    def fake_select_kernel(op, *tensors, gap):
        routed.append((op, tensors, gap))
        return lambda *args: ("kernel", args)

    patch_routing(monkeypatch, fake_select_kernel)
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 1, 3, 4)
    cos, sin = NeoxRotaryEmbedding(4)(torch.arange(3))
    assert apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2) == (
        "kernel", (q, k, cos, sin, 2))
    assert [(op, gap) for op, _, gap in routed] == [("rotary_neox", "rotary")]
    assert routed[0][1] == (q, k)


def test_cpu_calls_are_counted_out_of_scope():
    cos, sin = NeoxRotaryEmbedding(4)(torch.arange(3))
    q = torch.randn(1, 2, 3, 4)
    apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=0)  # (T, D) -> (1, T, D)
    assert ops.gap_counts() == {("out_of_scope", "rotary_neox:cpu"): 1}
