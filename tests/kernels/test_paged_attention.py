"""``paged_decode``: the decode-step paged attention kernel against the torch path.

The oracle is ``Attention.forward_native`` over the gathered blocks in float32 (the torch path
of ``oasr.cache.paged_attention`` upcast); the kernel reads fp16/bf16 and accumulates in fp32,
so the bound is a few units of the output dtype's rounding (checked as ||out - ref|| / ||ref||
and max abs). Blocks are scattered at random over a pool whose stale blocks hold noise, rows
have odd lengths, left padding, a one-key window and an empty one; outputs are poisoned first.
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from oasr import ops
from oasr.cache.paged import BlockPool
from oasr.cache.paged_attention import gather_blocks, paged_attention
from oasr.kernels import paged_attention as kernel
from oasr.layers.attention import Attention

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_registered_for_the_paged_attention_op() -> None:
    impl = ops.registered_kernels()["paged_attention"].load()
    assert impl.fn is kernel.paged_decode and impl.supports is kernel.supports
    assert impl.library is not None and impl.library.name == "paged_decode"
    q = torch.zeros(2, 4, 1, 64, dtype=torch.float16)
    cache = torch.zeros(8, 16, 2, 64, dtype=torch.float16)
    assert not kernel.supports(q[:, :, :, :48].contiguous(), cache[..., :48].contiguous(),
                               cache[..., :48].contiguous())  # head dim 48
    assert not kernel.supports(torch.zeros(2, 4, 3, 64, dtype=torch.float16), cache, cache)
    assert not kernel.supports(q.float(), cache.float(), cache.float())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_library_compiles_for_hopper(tmp_path, monkeypatch) -> None:
    from oasr.kernels import jit

    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OASR_CUDA_ARCH", "sm_90")
    from oasr.ops.build import PAGED_DECODE

    assert jit.build(PAGED_DECODE).is_file()
    lib = jit.load(PAGED_DECODE)  # the exported table checked against the declarations
    assert len(lib.oasr_paged_decode.argtypes) == 5


def _scattered(pool: BlockPool, k: torch.Tensor, v: torch.Tensor, gen: torch.Generator):
    b, _, t, _ = k.shape
    bs = pool.block_size
    per_row = math.ceil(t / bs)
    ids = torch.randperm(pool.num_blocks - 1, generator=gen)[:b * per_row] + 1
    table = ids.view(b, per_row).to(k.device)
    pos = torch.arange(t, device=k.device)
    pool.k(0)[table[:, pos // bs], pos % bs] = k.transpose(1, 2)
    pool.v(0)[table[:, pos // bs], pos % bs] = v.transpose(1, 2)
    return table


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [32, 64, 128])
@pytest.mark.parametrize("block_size,heads,kv_heads,t", [(16, 6, 6, 77), (32, 8, 2, 1500),
                                                          (1, 4, 4, 9)])
def test_kernel_matches_torch(dtype, head_dim, block_size, heads, kv_heads, t) -> None:
    gen = torch.Generator().manual_seed(head_dim * 7 + block_size + t)
    b = 6
    dev = "cuda"
    q = torch.randn(b, heads, 1, head_dim, generator=gen).to(dev, dtype)
    k = torch.randn(b, kv_heads, t, head_dim, generator=gen).to(dev, dtype)
    v = torch.randn(b, kv_heads, t, head_dim, generator=gen).to(dev, dtype)
    lens = torch.tensor([t, 1, t // 2 + 1, t - 1, 0, t], device=dev)
    starts = torch.tensor([0, 0, 3, min(5, t - 1), 0, t - 1], device=dev)
    pool = BlockPool(1, b * math.ceil(t / block_size) + 9, block_size, kv_heads, head_dim, dev,
                     dtype)
    pool.kv.normal_()  # stale blocks must not leak in
    table = _scattered(pool, k, v, gen)
    attn = Attention(heads, head_dim)
    for starts_, lens_, width in ((None, lens, None), (starts, lens, t), (None, None, t)):
        out = torch.full((b, heads, 1, head_dim), float("nan"), dtype=dtype, device=dev)
        got = kernel.paged_decode(q, pool.k(0), pool.v(0), table, lens_, starts_, width,
                                  attn.scale, False)
        out.copy_(got)
        ref = attn.forward_native(q.float(), gather_blocks(pool.k(0), table, width).float(),
                                  gather_blocks(pool.v(0), table, width).float(),
                                  kv_lens=lens_, kv_starts=starts_)
        assert not out.isnan().any()
        err = (out.float() - ref).norm() / ref.norm().clamp_min(1e-6)
        assert err < (3e-3 if dtype == torch.float16 else 2e-2), float(err)
        tol = 4e-3 if dtype == torch.float16 else 3e-2
        torch.testing.assert_close(out.float(), ref, atol=tol, rtol=0)
        if lens_ is not None:
            assert torch.equal(out[4], torch.zeros_like(out[4]))  # no visible key: zeros


@pytest.mark.gpu
@needs_cuda
def test_paged_attention_routes_decode_steps_to_the_kernel() -> None:
    dev, dtype, b, h, d, t = "cuda", torch.float16, 3, 4, 64, 40
    gen = torch.Generator().manual_seed(0)
    pool = BlockPool(1, 32, 16, h, d, dev, dtype)
    k = torch.randn(b, h, t, d, generator=gen).to(dev, dtype)
    table = _scattered(pool, k, k, gen)
    attn = Attention(h, d)
    ops.reset_counts()
    q = torch.randn(b, h, 1, d, generator=gen).to(dev, dtype)
    paged_attention(attn, q, pool.k(0), pool.v(0), table, torch.full((b,), t, device=dev))
    qs = torch.randn(b, h, 5, d, generator=gen).to(dev, dtype)  # a prefill: the fmha gap
    paged_attention(attn, qs, pool.k(0), pool.v(0), table, torch.full((b,), t, device=dev))
    counts = ops.gap_counts()
    assert counts[("kernel", "paged_attention")] == 1 and counts[("gap", "fmha")] >= 1


@pytest.mark.gpu
@needs_cuda
def test_kernel_replays_in_a_cuda_graph_bit_identically() -> None:
    dev, dtype, b, h, d, t = "cuda", torch.float16, 4, 6, 64, 100
    gen = torch.Generator().manual_seed(1)
    pool = BlockPool(1, 64, 16, h, d, dev, dtype)
    k = torch.randn(b, h, t, d, generator=gen).to(dev, dtype)
    table = _scattered(pool, k, k * 0.5, gen)
    lens = torch.full((b,), t, device=dev)
    q = torch.randn(b, h, 1, d, generator=gen).to(dev, dtype)
    attn = Attention(h, d)
    eager = kernel.paged_decode(q, pool.k(0), pool.v(0), table, lens, None, None, attn.scale,
                                False)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = kernel.paged_decode(q, pool.k(0), pool.v(0), table, lens, None, None, attn.scale,
                                  False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
