"""The batched word-timing alignment against its row-by-row statement, on ragged rows.

``align_rows`` (one pass, one matrix build, one DTW for the batch) must give every row the
spans ``align_rows_per_row`` gives it; the padded matrix build (``alignment_matrices``, what
CUDA runs) must equal each row's own ``alignment_matrix`` to float rounding and lead DTW to the
same path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.engine.decode import attention_align as aa
from oasr.engine.decode.dtw import dtw_starts
from tests.helpers.tiny_whisper import build_tiny_whisper

# Ragged rows: an empty text, frames at and under the median filter's half width (3), frames
# past the window (clamped), prompts of different lengths.
TEXTS = [[7, 8, 9], [], [11] * 20, [12, 13], [14, 15, 16, 17, 18, 19], [20]]
FRAMES = [40, 17, 1000, 3, 2, 64]
PROMPTS = [[1, 4], [1, 4], [1, 5, 6, 4], [1, 4], [1, 5, 6, 4], [1, 4]]


def random_scores(rows: int, heads: int, seq: int, frames: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 3.0 * torch.randn(rows, heads, seq, frames, generator=g)


def geometry():
    lens = [len(p) + len(t) + 1 for p, t in zip(PROMPTS, TEXTS)]
    firsts = [len(p) - 1 for p in PROMPTS]
    counts = [len(t) + 1 for t in TEXTS]
    return lens, firsts, counts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_padded_matrices_equal_each_rows_own(seed: int) -> None:
    lens, firsts, counts = geometry()
    T = 80
    scores = random_scores(len(TEXTS), 3, max(lens), T, seed)
    frames = [max(1, min(f, T)) for f in FRAMES]
    batched = aa.alignment_matrices(scores, lens, firsts, counts, frames)
    rows = aa.row_matrices(scores, lens, firsts, counts, frames)
    assert batched.shape == rows.shape == (len(TEXTS), max(counts), max(frames))
    torch.testing.assert_close(batched, rows, rtol=1e-5, atol=1e-5)
    for i, (n, f) in enumerate(zip(counts, frames)):  # the padding is zero
        assert not batched[i, n:].any() and not batched[i, :, f:].any()
        single = aa.alignment_matrix(scores[i, :, :lens[i]], f)[firsts[i]:firsts[i] + n]
        torch.testing.assert_close(batched[i, :n, :f], single, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dtw_starts(-batched, counts, frames),
                                  dtw_starts(-rows, counts, frames))


def test_padded_median_filter_chunks_like_one_piece(monkeypatch) -> None:
    lens, firsts, counts = geometry()
    scores = random_scores(len(TEXTS), 2, max(lens), 70, 5)
    frames = [max(1, min(f, 70)) for f in FRAMES]
    whole = aa.alignment_matrices(scores, lens, firsts, counts, frames)
    monkeypatch.setattr(aa, "MEDIAN_CHUNK_ELEMENTS", 1)  # one row per chunk
    torch.testing.assert_close(aa.alignment_matrices(scores, lens, firsts, counts, frames),
                               whole, rtol=0, atol=0)


def test_batched_spans_equal_per_row_spans_on_a_model() -> None:
    tw = build_tiny_whisper(seed=3, with_hf=False)
    dec = tw.model.decoder
    torch.manual_seed(0)
    rows = len(TEXTS)
    with torch.inference_mode():
        enc = torch.randn(rows, 50, tw.config.d_model)
        prompt = torch.full((rows, 1), tw.config.decoder_start_token_id)
        _, state = dec.prefill(enc, prompt, 2)
        ck, cv = state.cross.rows(torch.arange(rows))
        heads = [(0, 0), (1, 1), (1, 0)]
        eot = tw.config.eos_token_id
        a = aa.align_rows_per_row(dec, PROMPTS, TEXTS, FRAMES, ck, cv, heads, eot)
        b = aa.align_rows(dec, PROMPTS, TEXTS, FRAMES, ck, cv, heads, eot)
        # The padded build (CUDA's) read through the same DTW.
        tokens, lens = aa._padded_tokens(PROMPTS, TEXTS, eot, enc.device)
        scores = dec.cross_attention_scores(tokens, ck, cv, heads)
        frames = [max(1, min(f, scores.shape[-1])) for f in FRAMES]
        _, firsts, counts = geometry()
        padded = dtw_starts(-aa.alignment_matrices(scores, lens, firsts, counts, frames),
                            counts, frames)
    assert len(a) == len(b) == rows
    for i, (x, y) in enumerate(zip(a, b)):
        n = len(TEXTS[i])
        assert len(x.starts) == len(y.starts) == n
        np.testing.assert_array_equal(x.starts, y.starts)
        np.testing.assert_array_equal(x.ends, y.ends)
        np.testing.assert_array_equal(x.starts, padded[i, :n])
        np.testing.assert_array_equal(x.ends, padded[i, 1:n + 1])
        if n:
            assert x.starts[0] == 0 and (np.diff(x.starts) >= 0).all()
            assert (x.ends <= frames[i] - 1).all()
