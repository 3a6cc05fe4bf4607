"""``wfst_cuda``: the GPU WFST search against its statement on the host
(``oasr._C.wfst.device_search``, the same header run serially; itself checked against the CPU
search and through it kaldi-decoder in tests/graphs/) and, where max_active does not bind,
against the CPU search directly.

The two run the same double arithmetic and the same order-free pruning, so the paths (labels,
frames, words) and costs must be equal; only an exact tie between two paths could be broken
differently (the device numbers its tokens in the order threads reach them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.graphs.search import SearchOptions, decode_rows, decoded_frames, path_from_arcs
from oasr.graphs.store import load_graph
from oasr.kernels import wfst_cuda
from oasr.native import native
from tests.graphs.helpers import build_graph, build_random_graph, random_log_probs, small_lm

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_gap_declared() -> None:
    from oasr.ops import KERNEL_GAPS

    assert KERNEL_GAPS["wfst-search"] == wfst_cuda.WFST_SEARCH_GAP
    assert wfst_cuda.workspace_bytes(1000, 2) == 48000


def host_statement(loaded, lp, lens, opts):
    B, T, _ = lp.shape
    frames = np.zeros((B, T), np.int32)
    counts = np.zeros(B, np.int32)
    for b in range(B):
        kept = decoded_frames(lp[b, :, opts.blank], lp[b].argmax(-1), int(lens[b]), opts.blank,
                              opts.blank_skip_threshold)
        frames[b, :len(kept)], counts[b] = kept, len(kept)
    rows = native("wfst").device_search(loaded.graph.native(), lp, frames, counts,
                                        opts.native(), 65536, 4_000_000, 8 * T + 64,
                                        num_threads=4)
    return [path_from_arcs(loaded.graph, arcs, frames[b, :counts[b]], cost, bool(st & 1))
            for b, (st, cost, arcs) in enumerate(rows)]


def assert_same(gpu, ref, where):
    for b, (g, r) in enumerate(zip(gpu, ref)):
        at = f"{where} row {b}"
        assert g.labels.tolist() == r.labels.tolist(), at
        assert g.frames.tolist() == r.frames.tolist(), at
        assert g.entered.tolist() == r.entered.tolist(), at
        assert g.words.tolist() == r.words.tolist(), at
        assert g.reached_final == r.reached_final, at
        assert g.cost == r.cost, at


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return load_graph(build_graph(tmp_path_factory.mktemp("g"), "tg", small_lm(limit=30)))


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """5000 units, ~100k states: BPE-sized."""
    return load_graph(build_random_graph(tmp_path_factory.mktemp("r"), "r", seed=0,
                                         num_units=5000, num_words=2000, num_sentences=2000))


OPTIONS = [
    SearchOptions(beam=10.0, max_active=2**31 - 1, min_active=0),
    SearchOptions(beam=16.0, max_active=7000, min_active=200),
    SearchOptions(beam=12.0, max_active=40, min_active=5),  # max_active binds
    SearchOptions(beam=8.0, min_active=300),  # min_active binds
    SearchOptions(beam=12.0, acoustic_scale=0.7, blank_penalty=0.8),
    SearchOptions(beam=12.0, blank_skip_threshold=0.9),
]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("opts", OPTIONS, ids=range(len(OPTIONS)))
def test_gpu_equals_its_host_statement(small, opts):
    lp = random_log_probs(seed=7, batch=9, frames=120, sharpness=3.0)
    lp[:, :, 0] += 1.5  # blank-heavy, as CTC posteriors are
    lp = (lp - np.log(np.exp(lp).sum(-1, keepdims=True))).astype(np.float32)
    lens = np.array([120, 119, 100, 64, 33, 8, 2, 1, 0])
    gpu = wfst_cuda.decode(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(), small,
                           opts)
    assert_same(gpu, host_statement(small, lp, lens, opts), str(opts))
    if opts.max_active == 2**31 - 1 or opts.max_active == 7000:
        cpu = decode_rows(small.graph.native(), lp, lens, opts)  # Kaldi's decoder restated
        for g, c in zip(gpu, cpu):
            assert g.labels.tolist() == c.labels.tolist() and g.words.tolist() == c.words.tolist()


@pytest.mark.gpu
@needs_cuda
def test_gpu_on_a_bpe_sized_graph(large):
    lp = random_log_probs(seed=3, batch=8, frames=150, vocab=5000, sharpness=4.0)
    lp[:, :, 0] += 4.0
    lp = (lp - np.log(np.exp(lp).sum(-1, keepdims=True))).astype(np.float32)
    lens = np.array([150, 140, 130, 90, 75, 40, 10, 3])
    opts = SearchOptions(beam=14.0, max_active=3000, min_active=100)
    gpu = wfst_cuda.decode(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(), large,
                           opts)
    assert_same(gpu, host_statement(large, lp, lens, opts), "large")


@pytest.mark.gpu
@needs_cuda
def test_buffers_grow_until_the_batch_fits(small, monkeypatch):
    """A first launch with a tiny token arena and path overflows; the retry with them doubled
    gives the same paths. (The token table starts at the graph's state count for graphs under
    65,536 states, so it cannot overflow here and is not shrunk.)"""
    lp = random_log_probs(seed=2, batch=3, frames=60)
    lens = np.array([60, 50, 40])
    opts = SearchOptions(beam=16.0)
    real = wfst_cuda._launch
    sizes = []

    def tiny_first(lib, dg, search, lpd, frames, counts, shape, S, capacity, arena, path):
        if not sizes:
            arena, path = 64, 8
        sizes.append((capacity, arena, path))
        return real(lib, dg, search, lpd, frames, counts, shape, S, capacity, arena, path)

    monkeypatch.setattr(wfst_cuda, "_launch", tiny_first)
    gpu = wfst_cuda.decode(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(), small,
                           opts)
    assert len(sizes) >= 2 and sizes[-1][1] > 64 and sizes[-1][2] > 8
    assert_same(gpu, host_statement(small, lp, lens, opts), "retried")


@pytest.mark.gpu
@needs_cuda
def test_the_family_routes_cuda_log_probs_to_the_kernel(small):
    """On CUDA the family's search is the kernel (counted), and hot words take the declared
    gap to the CPU search; both give the host's result."""
    from types import SimpleNamespace

    from oasr.engine.decode.ctc_wfst import CtcWfstDecodeStrategy, CtcWfstOptions
    from oasr.engine.request import DecodingOptions, Request
    from oasr.ops import counting

    model = SimpleNamespace(config=SimpleNamespace(blank_id=0, vocab_size=28))
    lp = random_log_probs(seed=5, batch=2, frames=40)
    lens = np.array([40, 30])
    reqs = [Request(str(i), np.zeros(160, np.float32)) for i in range(2)]
    s = CtcWfstDecodeStrategy(model, CtcWfstOptions(graph=str(small.path)))
    before = counting.snapshot()
    outs = s.decode_offline(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(), reqs)
    assert counting.counts_since(before).get(("kernel", "wfst_search")) == 1
    ref = host_statement(small, lp, lens, s.search_options)
    assert [o.text for o in outs] == [" ".join(small.word_text(p.words)) for p in ref]
    hot = [Request(str(i), np.zeros(160, np.float32), DecodingOptions(hotwords="the"))
           for i in range(2)]
    before = counting.snapshot()
    s.decode_offline(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(), hot)
    assert counting.counts_since(before).get(("gap", "wfst-search")) == 1
