"""``ctc_cuda``: the GPU CTC prefix beam search against the CPU one (``oasr._C.ctc``).

The CPU search is the oracle (itself checked against brute force and a plain-Python statement
of WeNet's algorithm in tests/engine/decode/test_ctc.py): on random log-probs over many shapes
the GPU must return the same hypotheses (tokens, emitting frames), the same posteriors and the
same scores up to the last bits of double-precision exp/log1p (the device's libm is not the
host's), for offline batches and for the same audio fed as streaming chunks.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
import torch

from oasr.kernels import ctc_cuda
from tests.engine.decode.test_ctc import random_log_probs, reentries, wenet_prefix_beam

ctc = pytest.importorskip("oasr._C").ctc

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def cpu_search(lp: np.ndarray, lens: np.ndarray, beam: int, skip: float, nbest: int):
    return ctc.prefix_beam(lp, lens.astype(np.int64), 0, beam, skip, nbest, num_threads=2)


def assert_same(gpu_rows, cpu_rows, where: str) -> None:
    assert len(gpu_rows) == len(cpu_rows), where
    for r, (g_row, c_row) in enumerate(zip(gpu_rows, cpu_rows)):
        assert len(g_row) == len(c_row), f"{where} row {r}: {len(g_row)} vs {len(c_row)} hyps"
        for n, (g, c) in enumerate(zip(g_row, c_row)):
            at = f"{where} row {r} hyp {n}"
            assert g.tokens.tolist() == np.asarray(c.tokens).tolist(), at
            assert g.frames.tolist() == np.asarray(c.frames).tolist(), at
            np.testing.assert_allclose(g.probs, np.asarray(c.probs), rtol=1e-6, atol=0,
                                       err_msg=at)
            assert g.score == pytest.approx(c.score, rel=1e-9, abs=1e-9), at


# -- without a GPU ------------------------------------------------------------------------------


def test_gap_declared_and_scope() -> None:
    from oasr.ops import KERNEL_GAPS

    assert KERNEL_GAPS["ctc-beam-width"] == ctc_cuda.CTC_BEAM_WIDTH
    assert ctc_cuda.serves(1, 1) and ctc_cuda.serves(32, 32) and ctc_cuda.serves(10, 3)
    assert not ctc_cuda.serves(33, 1) and not ctc_cuda.serves(4, 5)


def test_read_back_layout_round_trips() -> None:
    """The one-copy read-back: sections packed at 8-byte offsets unpack to the hypotheses."""
    rows, nbest, max_len = 3, 2, 5
    sec = ctc_cuda._sections(rows, nbest, max_len)
    buf = np.zeros(sec["_total"][0], dtype=np.uint8)

    def part(name):
        off, count, dtype = sec[name]
        assert off % 8 == 0
        return buf[off:off + count * dtype.itemsize].view(dtype)

    part("counts")[:] = [2, 0, 1]
    part("lengths")[:] = [3, 1, 0, 0, 5, 0]
    part("scores")[:] = [-1.5, -2.5, 0, 0, -0.25, 0]
    tok = part("tokens").reshape(rows, nbest, max_len)
    fr = part("frames").reshape(rows, nbest, max_len)
    lp = part("post_lp").reshape(rows, nbest, max_len)
    tok[0, 0, :3] = [4, 7, 4]
    fr[0, 0, :3] = [0, 3, 9]
    lp[0, 0, :3] = [-0.1, -0.2, -0.3]
    tok[0, 1, :1] = [9]
    tok[2, 0, :5] = [1, 2, 3, 4, 5]
    out = ctc_cuda._unpack(buf, rows, nbest, max_len)
    assert [len(r) for r in out] == [2, 0, 1]
    assert out[0][0].tokens.tolist() == [4, 7, 4] and out[0][0].frames.tolist() == [0, 3, 9]
    np.testing.assert_allclose(out[0][0].probs, np.exp(np.float32([-0.1, -0.2, -0.3])))
    assert out[0][1].tokens.tolist() == [9] and out[0][0].score == -1.5
    assert out[2][0].tokens.tolist() == [1, 2, 3, 4, 5] and out[2][0].score == -0.25
    part("counts")[1] = -1
    with pytest.raises(RuntimeError, match="row 1 is void: its token trie overflowed"):
        ctc_cuda._unpack(buf, rows, nbest, max_len)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_library_compiles_for_hopper(tmp_path, monkeypatch) -> None:
    """The kernels build with nvcc for sm_90 without a GPU; a second build is a cache hit."""
    from oasr.kernels import jit

    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OASR_CUDA_ARCH", "sm_90")
    from oasr.ops.build import CTC_CUDA

    lib = jit.build(CTC_CUDA)
    assert lib.is_file() and lib.parent.parent == tmp_path / "jit"
    assert jit.build(CTC_CUDA) == lib
    assert jit.library_path(CTC_CUDA, arch="sm_80") != lib
    loaded = jit.load(CTC_CUDA)  # the exported table checked against the declarations
    assert loaded.oasr_ctc_chunk.argtypes[10] is ctypes.c_double


# -- on the GPU ---------------------------------------------------------------------------------

SHAPES = [  # (B, T, V, beam, blank_bias, scale)
    (3, 1, 5, 4, 0.0, 2.0),        # T = 1
    (4, 9, 3, 3, 0.0, 1.0),        # tiny vocabulary: repeats and merges everywhere
    (5, 12, 2, 4, 0.0, 1.0),       # vocabulary smaller than the beam (k = V)
    (6, 40, 37, 10, 1.0, 2.0),     # odd vocabulary
    (16, 200, 5000, 10, 2.0, 3.0),  # the shape
    (4, 60, 32000, 32, 2.0, 3.0),  # widest beam, 32k vocabulary
    (3, 50, 129, 17, 0.5, 4.0),    # odd beam
]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("B,T,V,beam,bias,scale", SHAPES)
@pytest.mark.parametrize("skip", [1.0, 0.6])
def test_offline_matches_cpu(B, T, V, beam, bias, scale, skip) -> None:
    rng = np.random.default_rng(B * 1000 + T + V + beam)
    lp = random_log_probs(rng, B, T, V, scale, bias)
    lens = rng.integers(0, T + 1, B)
    lens[0] = T
    nbest = min(beam, 4)
    gpu = ctc_cuda.decode_offline(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(),
                                  blank=0, beam_size=beam, blank_skip_threshold=skip,
                                  nbest=nbest)
    assert_same(gpu, cpu_search(lp, lens, beam, skip, nbest), f"{(B, T, V, beam, skip)}")


@pytest.mark.gpu
@needs_cuda
def test_beam_one_is_greedy() -> None:
    rng = np.random.default_rng(1)
    lp = random_log_probs(rng, 8, 120, 300, 3.0, 1.0)
    lens = rng.integers(1, 121, 8)
    gpu = ctc_cuda.decode_offline(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(),
                                  blank=0, beam_size=1)
    greedy = ctc.greedy(lp, lens.astype(np.int64), 0, num_threads=2)
    for g, c in zip(gpu, greedy):
        assert g[0].tokens.tolist() == np.asarray(c.tokens).tolist()
        assert g[0].frames.tolist() == np.asarray(c.frames).tolist()


@pytest.mark.gpu
@needs_cuda
def test_edge_frames_match_cpu() -> None:
    """All-blank rows, exact ties (uniform frames: order decides), -inf and NaN entries."""
    B, T, V = 6, 16, 6
    lp = np.full((B, T, V), np.log(1.0 / V), dtype=np.float32)          # row 0: uniform
    lp[1] = -np.inf
    lp[1, :, 0] = 0.0                                                   # row 1: all blank
    rng = np.random.default_rng(7)
    lp[2:] = random_log_probs(rng, B - 2, T, V, 2.0)
    lp[3, :, 4] = -np.inf                                               # a token never possible
    lp[4, ::3, 2] = np.nan                                              # NaNs never selected
    lp[5, :, 1:] = lp[5, :, 1:2]                                        # ties among non-blanks
    lens = np.full(B, T)
    for beam in (1, 3, 6, 8):
        nbest = min(beam, 3)
        gpu = ctc_cuda.decode_offline(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(),
                                      blank=0, beam_size=beam, nbest=nbest)
        assert_same(gpu, cpu_search(lp, lens, beam, 1.0, nbest), f"beam {beam}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("skip", [1.0, 0.6])
def test_streaming_chunks_continue_the_beam(skip) -> None:
    """The same rows fed in chunks of random sizes (some empty) equal one offline pass."""
    rng = np.random.default_rng(11)
    B, T, V, beam = 8, 150, 200, 8
    lp = random_log_probs(rng, B, T, V, 3.0, 2.0)
    lens = np.full(B, T)
    pool = ctc_cuda.CtcBeamPool(B + 3, beam, max_frames=T, blank_skip_threshold=skip)
    pool.open(3)  # other streams hold slots: rows map to slots 3..
    slots = pool.open(B)
    t = 0
    dev = torch.from_numpy(lp).cuda()
    while t < T:
        size = int(rng.choice([0, 1, 2, 7, 16, 33]))
        chunk = dev[:, t:t + size]
        if chunk.shape[1] == 0:
            chunk = dev[:, :0]
        pool.advance(slots, chunk, [chunk.shape[1]] * B)
        t += size
    pending = pool.finalize_async(slots, nbest=3)
    assert_same(pending.result(), cpu_search(lp, lens, beam, skip, 3), f"chunks skip {skip}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("beam,v", [(3, 3), (4, 3), (5, 4)])
def test_prefixes_returning_to_the_beam_match_wenet_statement(beam, v) -> None:
    """Flat rows over a few tokens, where prefixes drop out of the beam and come back while
    their extensions stay in: one prefix per token sequence, offline and in chunks."""
    rng = np.random.default_rng(40 + beam * v)
    B, T = 24, 30
    lp = random_log_probs(rng, B, T, v, 1.0)
    lens = np.full(B, T)
    returned = 0
    for row in range(B):
        trace: list[list[tuple[int, ...]]] = []
        wenet_prefix_beam(lp[row], T, 0, beam, trace=trace)
        returned += bool(reentries(trace))
    assert returned >= B // 3
    cpu = cpu_search(lp, lens, beam, 1.0, beam)
    for row in range(B):
        want = [p for p, _, _ in wenet_prefix_beam(lp[row], T, 0, beam)]
        assert [tuple(np.asarray(h.tokens).tolist()) for h in cpu[row]] == want
    dev = torch.from_numpy(lp).cuda()
    gpu = ctc_cuda.decode_offline(dev, torch.from_numpy(lens).cuda(), blank=0, beam_size=beam,
                                  nbest=beam)
    assert_same(gpu, cpu, f"offline beam {beam} V {v}")
    pool = ctc_cuda.CtcBeamPool(B, beam, max_frames=T)
    slots = pool.open(B)
    for t in range(0, T, 7):
        chunk = dev[:, t:t + 7]
        pool.advance(slots, chunk, [chunk.shape[1]] * B)
    assert_same(pool.finalize_async(slots, nbest=beam).result(), cpu,
                f"chunks beam {beam} V {v}")


@pytest.mark.gpu
@needs_cuda
def test_pool_refuses_a_stream_past_max_frames() -> None:
    pool = ctc_cuda.CtcBeamPool(2, 4, max_frames=10)
    slots = pool.open(2)
    lp = torch.log_softmax(torch.randn(2, 8, 5, device="cuda"), -1)
    pool.advance(slots, lp)
    with pytest.raises(RuntimeError, match="max_frames=10"):
        pool.advance(slots, lp)


@pytest.mark.gpu
@needs_cuda
def test_ctc_family_on_cuda_uses_the_kernel() -> None:
    """The ``ctc`` family's search on CUDA log-probs runs the kernel (counted), not the CPU."""
    from oasr import ops
    from oasr.engine.decode.ctc import cuda_search

    rng = np.random.default_rng(3)
    lp = random_log_probs(rng, 4, 30, 50, 3.0, 1.0)
    lens = np.array([30, 12, 1, 29])
    ops.reset_counts()
    rows = cuda_search(torch.from_numpy(lp).cuda(), torch.from_numpy(lens).cuda(), 0, 10, 1.0, 2)
    assert ops.gap_counts() == {("kernel", "ctc_prefix_beam"): 1}
    assert_same(rows, cpu_search(lp, lens, 10, 1.0, 2), "family")
    ops.reset_counts()
    assert cuda_search(torch.from_numpy(lp).cuda(), None, 0, 40, 1.0, 1) is None
    assert ops.gap_counts() == {("gap", "ctc-beam-width"): 1}


def test_without_nvcc_the_family_takes_the_declared_gap(monkeypatch) -> None:
    """No CUDA toolchain: the search runs on the CPU, counted under ``cuda-toolchain``."""
    from oasr import ops
    from oasr.engine.decode import ctc as family
    from oasr.ops import build

    class FakeCuda:
        is_cuda = True

    monkeypatch.setenv("OASR_NVCC", "off")
    build.toolchain_available.cache_clear()
    ops.set_backend("oasr")  # the routes re-resolve their static part
    try:
        ops.reset_counts()
        assert family.cuda_search(FakeCuda(), None, 0, 4, 1.0, 1) is None
        assert family.cuda_search(FakeCuda(), None, 0, 40, 1.0, 1) is None  # the shape gap first
        assert ops.gap_counts() == {("gap", "cuda-toolchain"): 1, ("gap", "ctc-beam-width"): 1}
        assert "nvcc" in ops.KERNEL_GAPS["cuda-toolchain"].what
    finally:
        monkeypatch.delenv("OASR_NVCC")
        build.toolchain_available.cache_clear()
        ops.set_backend(None)
