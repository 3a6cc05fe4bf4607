"""The converted frontend against transformers' ``NemotronAsrStreamingFeatureExtractor``
(offline, ``center=True``): raw log-mels, no normalization."""

from __future__ import annotations

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.24'")
if not hasattr(tf, "NemotronAsrStreamingFeatureExtractor"):
    pytest.skip("transformers has no NemotronAsrStreamingFeatureExtractor; pip install "
                "'transformers>=5.24'", allow_module_level=True)

from oasr.features.parakeet_logmel import parakeet_logmel  # noqa: E402
from oasr.models.nemotron_streaming.converter import HfNemotronStreamingConverter  # noqa: E402
from tests.models.nemotron_streaming.hf_tiny import save_hf  # noqa: E402


def test_unnormalized_logmel_matches_feature_extractor(tmp_path) -> None:
    save_hf(tmp_path)
    conv = HfNemotronStreamingConverter()
    conv._pre = __import__("json").loads((tmp_path / "preprocessor_config.json").read_text())
    feat_cfg = conv.build_feature_config(conv.build_config(tmp_path))
    assert feat_cfg.params["normalize"] == "none"
    audio = np.random.default_rng(0).standard_normal(8000).astype(np.float32) * 0.1
    ref = tf.NemotronAsrStreamingFeatureExtractor(feature_size=16)(
        audio, sampling_rate=16000, return_tensors="pt")
    ours, n = parakeet_logmel(torch.from_numpy(audio)[None], torch.tensor([8000]), feat_cfg)
    m = int(ref["attention_mask"].sum())
    assert int(n[0]) == m
    torch.testing.assert_close(ours[0, :m], ref["input_features"][0, :m], atol=1e-4, rtol=1e-4)
