"""Low-frame-rate stacking against a statement of FunASR's ``apply_lfr``.

The oracle, per row of ``T`` valid frames ``x`` (funasr/frontends/wav_frontend.py, checked
against funasr 1.4.16 for lfr_m in 1..11, lfr_n in 1..6, T in 1..39): ``ceil(T / lfr_n)``
output frames; the row left-padded by ``(lfr_m - 1) // 2`` copies of its first frame and
right-padded by copies of its last; output frame ``i`` is the concatenation of padded frames
``i * lfr_n .. i * lfr_n + lfr_m - 1``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oasr.engine.input_processor import InputProcessor
from oasr.engine.request import Request
from oasr.features import FeatureConfig
from oasr.features.lfr import apply_lfr_batch


def funasr_lfr(x: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """FunASR's formula, stated directly: (T, F) -> (ceil(T / n), m * F)."""
    t = x.shape[0]
    left = (m - 1) // 2
    padded = [x[0]] * left + list(x) + [x[-1]] * (m + n)
    rows = [torch.cat(padded[i * n:i * n + m]) for i in range(math.ceil(t / n))]
    return torch.stack(rows)


@pytest.mark.parametrize("m,n", [(7, 6), (5, 3), (1, 2), (4, 1), (3, 3), (2, 5)])
def test_batch_matches_the_formula_per_row(m, n):
    torch.manual_seed(0)
    lengths = torch.tensor([23, 1, 6, 17])
    feats = torch.randn(4, 23, 5)
    feats[torch.arange(23)[None] >= lengths[:, None]] = 1e6  # padding must never be read
    out, out_lens = apply_lfr_batch(feats, lengths, m, n)
    assert out.shape == (4, math.ceil(23 / n), m * 5)
    assert out_lens.tolist() == [math.ceil(int(t) / n) for t in lengths]
    for b, t in enumerate(lengths.tolist()):
        want = funasr_lfr(feats[b, :t], m, n)
        assert torch.equal(out[b, :out_lens[b]], want)


def test_off_is_the_identity_and_bad_factors_are_refused():
    feats, lens = torch.randn(2, 4, 3), torch.tensor([4, 2])
    out, out_lens = apply_lfr_batch(feats, lens, 1, 1)
    assert out is feats and out_lens is lens
    with pytest.raises(ValueError, match="lfr_m and lfr_n must be >= 1"):
        apply_lfr_batch(feats, lens, 0, 6)
    with pytest.raises(ValueError, match="lfr_m and lfr_n must be >= 1"):
        FeatureConfig("fbank", lfr_m=7, lfr_n=0)


def test_the_engine_stacks_any_extractors_output():
    # The encoder sees stacked frames, matching the lfr_n frame clock.
    plain = InputProcessor(FeatureConfig("fbank", num_mel_bins=8), "cpu")
    stacked = InputProcessor(FeatureConfig("fbank", num_mel_bins=8, lfr_m=7, lfr_n=6), "cpu")
    rng = np.random.default_rng(0)
    reqs = [Request("a", rng.standard_normal(16000).astype(np.float32)),
            Request("b", rng.standard_normal(7000).astype(np.float32))]
    feats, lens = plain(reqs)
    out, out_lens = stacked(reqs)
    assert out.shape[-1] == 7 * 8
    assert out_lens.tolist() == [math.ceil(int(t) / 6) for t in lens]
    for b, t in enumerate(lens.tolist()):
        assert torch.allclose(out[b, :out_lens[b]], funasr_lfr(feats[b, :t], 7, 6))
    assert stacked.cost(reqs[0]) == math.ceil(plain.cost(reqs[0]) / 6)
