"""``parakeet_logmel_streaming`` + ``parakeet_logmel_flush`` (``normalize: none``) concatenate
to the offline ``parakeet_logmel`` frames, for chunk sizes down to one sample."""

from __future__ import annotations

import pytest
import torch

from oasr.features.parakeet_logmel import parakeet_logmel
from oasr.features.parakeet_streaming import parakeet_logmel_flush, parakeet_logmel_streaming
from oasr.features.spec import FeatureConfig

CFG = FeatureConfig("parakeet_logmel", num_mel_bins=16,
                    params={"n_fft": 512, "preemphasis": 0.97, "normalize": "none"})


@pytest.mark.parametrize("sizes", [[1] * 700 + [2600], [3300], [0, 160, 97, 1, 2000, 1042],
                                   [255, 256, 257, 2532]])
def test_chunks_concatenate_to_offline(sizes: list[int]) -> None:
    audio = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(0)) * 0.1
    ref, n = parakeet_logmel(audio[None], torch.tensor([audio.shape[0]]), CFG)
    state, out, pos = None, [], 0
    for k in sizes:
        feats, state = parakeet_logmel_streaming(audio[pos:pos + k], state, CFG)
        out.append(feats)
        pos += k
    out.append(parakeet_logmel_flush(state, CFG))
    got = torch.cat(out)
    assert got.shape[0] == int(n[0])
    torch.testing.assert_close(got, ref[0, :int(n[0])], atol=1e-4, rtol=1e-4)


def test_normalized_form_is_refused() -> None:
    cfg = FeatureConfig("parakeet_logmel", num_mel_bins=16)
    with pytest.raises(ValueError, match="cannot stream"):
        parakeet_logmel_streaming(torch.zeros(400), None, cfg)
