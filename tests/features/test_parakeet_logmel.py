"""``parakeet_logmel`` against transformers' ``ParakeetFeatureExtractor`` on real speech."""

from __future__ import annotations

import pytest
import soundfile as sf
import torch

from oasr.features.parakeet_logmel import parakeet_logmel
from oasr.features.spec import FeatureConfig
from tests.helpers.data import SHARED_DATA

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.23'")
AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"


@pytest.mark.parametrize("bins", [80, 128])
def test_matches_parakeet_feature_extractor_batched(bins: int) -> None:
    if not hasattr(tf, "ParakeetFeatureExtractor"):
        pytest.skip("transformers has no ParakeetFeatureExtractor (>= 5.23)")
    files = sorted(AUDIO.glob("*.flac"))[:3]
    if not files:
        pytest.skip(f"{AUDIO} is not on this machine")
    wavs = [sf.read(str(f), dtype="float32")[0] for f in files]
    ref = tf.ParakeetFeatureExtractor(feature_size=bins)(
        wavs, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    x = torch.zeros(len(wavs), max(len(w) for w in wavs))
    for i, w in enumerate(wavs):
        x[i, :len(w)] = torch.from_numpy(w)
    cfg = FeatureConfig("parakeet_logmel", num_mel_bins=bins)
    feats, lens = parakeet_logmel(x, torch.tensor([len(w) for w in wavs]), cfg)
    assert lens.tolist() == ref.attention_mask.sum(-1).tolist()
    torch.testing.assert_close(feats, ref.input_features, atol=2e-5, rtol=1e-5)
    # a row alone computes what it computes in the batch
    alone, _ = parakeet_logmel(x[2:, :len(wavs[2])], torch.tensor([len(wavs[2])]), cfg)
    n = int(lens[2])
    torch.testing.assert_close(alone[0, :n], feats[2, :n], atol=1e-5, rtol=1e-5)


def test_refuses_a_hop_longer_than_the_window() -> None:
    cfg = FeatureConfig("parakeet_logmel", frame_shift_ms=30.0, frame_length_ms=25.0)
    with pytest.raises(ValueError, match="hop"):
        parakeet_logmel(torch.zeros(1, 1600), torch.tensor([1600]), cfg)
