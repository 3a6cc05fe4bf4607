"""Paged decoder KV: the block pool, block tables, and paged attention against dense attention.

Oracles: the dense storage (``DenseKv`` / ``CrossKv``) and ``Attention`` over the same keys
read in place. Equal key widths must agree bit for bit; a bucketed step width (extra, masked
keys) changes only the order of a reduction, so it agrees within 1e-6.
"""

from __future__ import annotations

import math

import pytest
import torch

from oasr.cache.decoder_state import AedState, CrossKv, DenseKv
from oasr.cache.kv_budget import DecoderCacheSpec, DecoderKvBudget, resolve_kv_storage
from oasr.cache.paged import (
    NULL_BLOCK,
    BlockPool,
    PagedCrossKv,
    PagedKv,
    PoolExhausted,
    bucket_blocks,
)
from oasr.cache.paged_attention import gather_blocks, paged_attention
from oasr.layers.attention import Attention

STEP_ATOL = 1e-6


def _pool(num_blocks: int = 64, block_size: int = 4, heads: int = 2, head_dim: int = 8,
          layers: int = 1) -> BlockPool:
    return BlockPool(layers, num_blocks, block_size, heads, head_dim, "cpu", torch.float32)


# -- the pool -----------------------------------------------------------------------------------


def test_pool_hands_out_distinct_blocks_never_the_null_one_and_takes_them_back():
    pool = _pool(num_blocks=9)
    assert pool.free_blocks == 8 and pool.used_blocks == 0
    a = pool.allocate(3)
    b = pool.allocate(5)
    assert len(set(a + b)) == 8 and NULL_BLOCK not in a + b
    assert pool.free_blocks == 0 and pool.used_blocks == 8
    with pytest.raises(PoolExhausted, match="1 blocks asked, 0 free"):
        pool.allocate(1)
    pool.free(a)
    assert pool.free_blocks == 3
    again = pool.allocate(3)
    assert sorted(again) == sorted(a)  # the freed blocks, not new ones
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([NULL_BLOCK])
    pool.free(b)
    with pytest.raises(ValueError, match="double free"):
        pool.free(b[:1])


def test_exhaustion_takes_nothing():
    pool = _pool(num_blocks=11, block_size=4)  # 10 usable blocks
    with pytest.raises(PoolExhausted, match="3 rows x 4 blocks"):
        pool.allocate_rows(3, 13)  # 3 rows x 4 blocks = 12 > 10
    assert pool.free_blocks == 10
    blocks, table = pool.allocate_rows(2, 13)
    assert table.shape == (2, 4) and table.dtype == torch.long
    assert table.tolist() == blocks and pool.free_blocks == 2
    with pytest.raises(ValueError, match="null block"):
        _pool(num_blocks=1)


@pytest.mark.parametrize("n,width,want", [(1, 28, 1), (2, 28, 2), (3, 28, 4), (5, 28, 8),
                                          (9, 28, 16), (17, 28, 28), (28, 28, 28), (4, 4, 4),
                                          (3, 3, 3)])
def test_bucket_blocks(n, width, want):
    assert bucket_blocks(n, width) == want


def test_the_number_of_step_widths_is_logarithmic():
    widths = {bucket_blocks(math.ceil(p / 16), 28) for p in range(1, 449)}
    assert widths == {1, 2, 4, 8, 16, 28}


# -- block tables -------------------------------------------------------------------------------


def test_merge_pads_tables_with_the_null_block_and_moves_no_kv():
    pool = _pool(num_blocks=40, block_size=4)
    pool.kv.normal_()
    a = PagedKv.allocate(pool, 2, capacity=10)  # 3 blocks per row
    b = PagedKv.allocate(pool, 3, capacity=17)  # 5 blocks per row
    before = pool.kv.clone()
    merged = a.merge(b)
    assert merged.table.shape == (5, 5)
    assert merged.table[:2, 3:].eq(NULL_BLOCK).all()
    assert merged.table[:2, :3].tolist() == a.table.tolist()
    assert merged.table[2:].tolist() == b.table.tolist()
    assert merged.capacity == 17 and merged.held_blocks == 2 * 3 + 3 * 5
    assert torch.equal(pool.kv, before)


def test_select_compacts_by_table_frees_the_rest_and_refuses_repeats():
    pool = _pool(num_blocks=40, block_size=4)
    kv = PagedKv.allocate(pool, 4, capacity=8)
    kv.lens = torch.tensor([3, 5, 7, 1])
    rows = kv.table.tolist()
    free_before = pool.free_blocks
    before = pool.kv.clone()
    sel = kv.select(torch.tensor([3, 1]))
    assert sel.table.tolist() == [rows[3], rows[1]]
    assert sel.lens.tolist() == [1, 5]
    assert pool.free_blocks == free_before + 2 * 2  # rows 0 and 2 went back
    assert torch.equal(pool.kv, before)
    with pytest.raises(ValueError, match="beam search keeps dense"):
        sel.select(torch.tensor([0, 0]))


def test_release_rows_frees_blocks_and_points_the_rows_at_the_null_block():
    pool = _pool(num_blocks=40, block_size=4)
    state = AedState(PagedKv.allocate(pool, 3, capacity=8),
                     PagedCrossKv.allocate(pool, 3, window=6))
    used = pool.used_blocks
    state.release_rows([1])
    assert pool.used_blocks == used - 2 - 2
    assert state.kv.table[1].eq(NULL_BLOCK).all() and state.cross.table[1].eq(NULL_BLOCK).all()
    assert state.kv.table[0].ne(NULL_BLOCK).all()
    state.release_rows([1])  # idempotent
    assert pool.used_blocks == used - 4
    state.select(torch.tensor([0, 2]))
    state.release_rows([0, 2])
    assert pool.used_blocks == 0


def test_dense_and_paged_groups_do_not_merge():
    pool = _pool(num_blocks=40, block_size=4, heads=2, head_dim=8)
    dense = AedState(DenseKv.allocate(1, 2, 2, 8, 8, "cpu", torch.float32),
                     CrossKv([torch.zeros(2, 2, 6, 8)], [torch.zeros(2, 2, 6, 8)], None))
    paged = AedState(PagedKv.allocate(pool, 2, 8), PagedCrossKv.allocate(pool, 2, 6))
    other = AedState(PagedKv.allocate(_pool(), 2, 8), PagedCrossKv.allocate(_pool(), 2, 6))
    assert not dense.can_merge(paged) and not paged.can_merge(dense)
    assert not paged.can_merge(other)  # another pool
    assert paged.capturable and not dense.capturable


# -- paged attention against dense attention ----------------------------------------------------


def _scattered(pool: BlockPool, k: torch.Tensor, v: torch.Tensor, gen: torch.Generator
               ) -> torch.Tensor:
    """Write dense (B, H, T, D) keys into randomly chosen, non-contiguous blocks; the table."""
    b, _, t, _ = k.shape
    bs = pool.block_size
    per_row = math.ceil(t / bs)
    ids = torch.randperm(pool.num_blocks - 1, generator=gen)[:b * per_row] + 1
    table = ids.view(b, per_row)
    pos = torch.arange(t)
    pool.k(0)[table[:, pos // bs], pos % bs] = k.transpose(1, 2)
    pool.v(0)[table[:, pos // bs], pos % bs] = v.transpose(1, 2)
    return table


@pytest.mark.parametrize("block_size", [1, 8, 16, 32])
@pytest.mark.parametrize("head_dim", [16, 64])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_paged_attention_equals_dense(block_size, head_dim, kv_heads):
    gen = torch.Generator().manual_seed(block_size * 1000 + head_dim + kv_heads)
    b, heads, t = 5, 4, 37
    q = torch.randn(b, heads, 1, head_dim, generator=gen)
    k = torch.randn(b, kv_heads, t, head_dim, generator=gen)
    v = torch.randn(b, kv_heads, t, head_dim, generator=gen)
    lens = torch.tensor([37, 1, 20, 33, 16])  # odd lengths, a block edge, one key
    starts = torch.tensor([0, 0, 5, 2, 15])  # left padding
    pool = BlockPool(1, 5 * math.ceil(t / block_size) + 9, block_size, kv_heads, head_dim,
                     "cpu", torch.float32)
    pool.kv.normal_(generator=gen)  # stale blocks must not leak in
    table = _scattered(pool, k, v, gen)
    assert torch.equal(gather_blocks(pool.k(0), table, t), k)
    attn = Attention(heads, head_dim)
    for starts_ in (None, starts):
        dense = attn(q, k, v, kv_lens=lens, kv_starts=starts_)
        # Equal width: the same attention on the same keys.
        same = paged_attention(attn, q, pool.k(0), pool.v(0), table, lens, starts_, t)
        assert torch.equal(same, dense)
        # The whole table (as a bucketed step reads it): masked extra keys.
        wide = paged_attention(attn, q, pool.k(0), pool.v(0), table, lens, starts_)
        torch.testing.assert_close(wide, dense, atol=STEP_ATOL, rtol=0)


@pytest.mark.parametrize("block_size", [4, 16])
def test_causal_prefill_over_a_paged_table_equals_dense(block_size):
    gen = torch.Generator().manual_seed(block_size)
    b, h, d, s = 3, 2, 16, 7
    attn = Attention(h, d, causal=True)
    k = torch.randn(b, h, s, d, generator=gen)
    v = torch.randn(b, h, s, d, generator=gen)
    q = torch.randn(b, h, s, d, generator=gen)
    pool = BlockPool(1, 40, block_size, h, d, "cpu", torch.float32)
    table = _scattered(pool, k, v, gen)
    dense = attn(q, k, v, kv_lens=torch.full((b,), s))
    paged = paged_attention(attn, q, pool.k(0), pool.v(0), table, torch.full((b,), s), None, s)
    assert torch.equal(paged, dense)


@pytest.mark.parametrize("block_size", [1, 4, 16, 32])
@pytest.mark.parametrize("head_dim", [8, 32])
def test_paged_kv_follows_dense_kv_through_prefill_steps_merge_and_compaction(block_size,
                                                                              head_dim):
    """The storages side by side on the same projected keys: prefill is bit-identical, every
    step within 1e-6 (the bucketed width), through a merge of groups at different depths and a
    compaction."""
    gen = torch.Generator().manual_seed(7 * block_size + head_dim)
    h, layers, cap = 2, 2, 30
    attn = Attention(h, head_dim, causal=True)
    pool = BlockPool(layers, 5 * math.ceil(cap / block_size) + 1, block_size, h, head_dim,
                     "cpu", torch.float32)

    def prefill(b: int, p: int):
        dense = DenseKv.allocate(layers, b, h, cap, head_dim, "cpu", torch.float32)
        paged = PagedKv.allocate(pool, b, cap)
        outs = []
        for layer in range(layers):
            kn, vn, q = (torch.randn(b, h, p, head_dim, generator=gen) for _ in range(3))
            for st in (dense, paged):
                st.write(layer, kn, vn)
            outs.append((dense.attend(layer, attn, q), paged.attend(layer, attn, q)))
        dense.advance(p)
        paged.advance(p)
        for a, c in outs:
            assert torch.equal(a, c)
        return dense, paged

    def step(dense, paged):
        b = dense.batch
        for layer in range(layers):
            kn, vn, q = (torch.randn(b, h, 1, head_dim, generator=gen) for _ in range(3))
            dense.write(layer, kn, vn)
            paged.write(layer, kn, vn)
            torch.testing.assert_close(paged.attend(layer, attn, q),
                                       dense.attend(layer, attn, q), atol=STEP_ATOL, rtol=0)
        dense.advance(1)
        paged.advance(1)

    d1, p1 = prefill(2, 3)
    for _ in range(5):
        step(d1, p1)
    d2, p2 = prefill(3, 2)
    dense, paged = d1.merge(d2), p1.merge(p2)
    assert torch.equal(paged.lens, dense.lens)
    for _ in range(7):
        step(dense, paged)
    idx = torch.tensor([0, 4, 2])
    dense, paged = dense.select(idx), paged.select(idx)
    for _ in range(6):
        step(dense, paged)
    assert paged.lens.tolist() == dense.lens.tolist() == [3 + 18, 2 + 13, 2 + 13]


def test_paged_cross_reads_the_window_as_dense_does():
    gen = torch.Generator().manual_seed(3)
    b, h, d, t, layers = 3, 2, 16, 23, 2
    pool = BlockPool(layers, 40, 8, h, d, "cpu", torch.float32)
    ks = [torch.randn(b, h, t, d, generator=gen) for _ in range(layers)]
    vs = [torch.randn(b, h, t, d, generator=gen) for _ in range(layers)]
    cross = PagedCrossKv.allocate(pool, b, t)
    for i in range(layers):
        cross.write(i, ks[i], vs[i])
    dense = CrossKv(ks, vs, None)
    attn = Attention(h, d)
    q = torch.randn(b, h, 1, d, generator=gen)
    for i in range(layers):
        assert torch.equal(cross.attend(i, attn, q), dense.attend(i, attn, q))
    idx = torch.tensor([2, 0])
    rk, rv = cross.rows(idx)
    dk, dv = dense.rows(idx)
    assert all(torch.equal(a, c) for a, c in zip(rk + rv, dk + dv))


# -- storage choice and the budget --------------------------------------------------------------


@pytest.mark.parametrize("requested,cuda,greedy,graphs,want", [
    ("auto", True, True, True, "paged"),
    ("auto", True, True, False, "dense"),
    ("auto", False, True, False, "dense"),
    ("auto", True, False, False, "dense"),
    ("paged", False, True, False, "paged"),
    ("dense", True, False, False, "dense"),
    ("dense", True, True, True, "dense"),
])
def test_resolve_kv_storage(requested, cuda, greedy, graphs, want):
    assert resolve_kv_storage(requested, cuda=cuda, greedy=greedy, graphs=graphs) == want


def test_paged_named_with_beam_search_is_refused():
    # Refused, never quietly served dense.
    with pytest.raises(ValueError, match="kv_storage='paged' cannot serve beam search"):
        resolve_kv_storage("paged", cuda=True, greedy=False, graphs=False)


def test_resolve_kv_storage_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="valid: auto, dense, paged"):
        resolve_kv_storage("pages", cuda=False, greedy=True, graphs=False)


def test_budget_counts_the_cross_half():
    # Whisper large-v3's geometry: 32 layers, 20 heads of 64, a 1500-frame window, fp16.
    spec = DecoderCacheSpec(32, 20, 64, cross_len=1500)
    row = spec.row_bytes(448, torch.float16)
    assert row == (448 + 1500) * 2 * 32 * 20 * 64 * 2
    assert 300e6 < row < 330e6 and spec.row_bytes(0, torch.float16) > 0.75 * row
    dense = DecoderKvBudget(spec, "dense", 448, budget_gib=1.0, dtype=torch.float16)
    assert dense.admit_limit(0) == 2**30 // row == 3
    assert dense.admit_limit(2) == 1 and dense.admit_limit(5) == 0
    assert DecoderKvBudget(spec, "dense", 448, dtype=torch.float16).admit_limit(100) is None


def test_paged_budget_is_the_pool_and_admission_follows_its_free_list():
    spec = DecoderCacheSpec(2, 2, 8, cross_len=10)
    budget = DecoderKvBudget(spec, "paged", 12, block_size=4, max_rows=3)
    assert budget.row_blocks == 3 + 3
    assert budget.num_blocks == 3 * 6 + 1
    assert budget.admit_limit(0) == 3
    pool = budget.pool
    assert pool is budget.pool  # allocated once
    kv = PagedKv.allocate(pool, 1, 12)
    cross = PagedCrossKv.allocate(pool, 1, 10)
    assert budget.admit_limit(0) == 2
    AedState(kv, cross).release_rows([0])
    assert budget.admit_limit(0) == 3
    gib = budget.block_bytes * (2 * 6 + 1) / 2**30
    assert DecoderKvBudget(spec, "paged", 12, block_size=4, budget_gib=gib).admit_limit(0) == 2


def test_a_budget_below_one_row_is_refused():
    spec = DecoderCacheSpec(2, 2, 8, cross_len=10)
    with pytest.raises(ValueError, match="holds no row"):
        DecoderKvBudget(spec, "paged", 12, block_size=4, budget_gib=1e-9)
    with pytest.raises(ValueError, match="holds no row"):
        DecoderKvBudget(spec, "dense", 12, budget_gib=1e-9)
