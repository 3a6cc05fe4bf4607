"""FastConformer's relative-position attention: the SDPA form (``forward_fused``, what CUDA
runs) against the explicit scores + masked softmax (``forward_native``), and the position
scores' strided view (``relative_bias``) against a gather."""

from __future__ import annotations

import pytest
import torch

from oasr.models.fastconformer.attention import (
    RelPositionAttention,
    relative_bias,
    relative_sinusoids,
)


def _attention(c: int, h: int, dtype=torch.float64, device="cpu") -> RelPositionAttention:
    torch.manual_seed(c + h)
    a = RelPositionAttention(c, h).to(device=device, dtype=dtype)
    torch.nn.init.normal_(a.pos_bias_u)
    torch.nn.init.normal_(a.pos_bias_v)
    return a.eval()


def _inputs(b: int, t: int, c: int, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(b * 1000 + t)
    x = torch.randn(b, t, c, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    lens = torch.randint(1, t + 1, (b,), generator=g)
    lens[0] = t
    keep = (torch.arange(t)[None, :] < lens[:, None])[:, None, None, :].to(device)
    return x, relative_sinusoids(t, c, x.device, x.dtype), keep


@pytest.mark.parametrize("b,t,c,h", [(3, 1, 32, 4), (3, 7, 32, 4), (2, 16, 64, 8),
                                     (4, 33, 64, 2), (2, 50, 96, 3), (1, 129, 32, 4)])
def test_the_sdpa_form_equals_the_explicit_one(b, t, c, h):
    a = _attention(c, h)
    x, pos, keep = _inputs(b, t, c)
    with torch.inference_mode():
        torch.testing.assert_close(a.forward_fused(x, pos, keep), a.forward_native(x, pos, keep),
                                   rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("t", [1, 2, 15, 16, 17, 40])
def test_relative_bias_is_the_shifted_distance_scores_on_aligned_rows(t):
    b, h, d = 3, 2, 4
    q = torch.randn(b, t, h, d, dtype=torch.float64)
    p = torch.randn(2 * t - 1, h, d, dtype=torch.float64)
    view = relative_bias(q, p)
    i = torch.arange(t)
    dist = torch.einsum("bihd,khd->bhik", q, p)  # (B, H, T, 2T - 1)
    expected = dist.gather(-1, (t - 1 - i[:, None] + i[None, :]).expand(b, h, t, t))
    torch.testing.assert_close(view, expected)
    # SDPA's memory-efficient kernel reads a mask in place only when every stride but the
    # last is a multiple of 16 elements
    assert view.stride(-1) == 1
    assert all(s % 16 == 0 for s in view.stride()[:-1])
    assert view.storage_offset() % 16 == 0
    # no two elements share memory, so the in-place key mask writes each once
    view.fill_(0.0)
    view += 1.0
    assert torch.equal(view, torch.ones_like(view))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_forward_is_the_sdpa_form_and_equals_the_explicit_one(dtype):
    a = _attention(256, 4, dtype, "cuda")
    x, pos, keep = _inputs(5, 77, 256, dtype, "cuda")
    tol = {torch.float32: 2e-4, torch.bfloat16: 4e-2}[dtype]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # the backends the engine allows on CUDA (ASREngine._sdpa_backends)
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with torch.inference_mode(), sdpa_kernel(backends):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            ours = a(x, pos, keep)
        ref = a.forward_native(x, pos, keep)
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
    names = {e.name for e in prof.events()}
    assert any("efficient_attention" in n for n in names), sorted(names)
    # the mask is read where it lies: no padded copy of it
    assert "aten::constant_pad_nd" not in names and "aten::pad" not in names, sorted(names)
