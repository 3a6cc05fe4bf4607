"""The input processor stages only the longest row's samples for a fixed-window frontend: the
features equal those of the rows zero-padded to the whole window."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.engine.input_processor import InputProcessor
from oasr.engine.request import DecodingOptions, Request
from oasr.features.whisper_logmel import whisper_logmel
from tests.transcribe.conftest import feature_config


def test_short_rows_give_the_features_of_the_padded_window():
    config = feature_config(window_s=2.0)
    inputs = InputProcessor(config, "cpu")
    rng = np.random.default_rng(0)
    audios = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (3000, 11000, 7)]
    requests = [Request(f"r{i}", a, DecodingOptions()) for i, a in enumerate(audios)]
    feats, lens = inputs(requests)
    window = inputs.window_samples
    padded = torch.zeros(len(audios), window)
    for i, a in enumerate(audios):
        padded[i, :len(a)] = torch.from_numpy(a)
    want, want_lens = whisper_logmel(padded, torch.tensor([len(a) for a in audios]), config)
    assert torch.equal(feats, want) and torch.equal(lens, want_lens)


@pytest.mark.gpu
def test_short_rows_give_the_features_of_the_padded_window_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    config = feature_config(window_s=30.0)
    inputs = InputProcessor(config, "cuda")
    rng = np.random.default_rng(1)
    audios = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (48000, 112000, 400)]
    feats, lens = inputs([Request(f"r{i}", a, DecodingOptions()) for i, a in enumerate(audios)])
    padded = torch.zeros(len(audios), inputs.window_samples)
    for i, a in enumerate(audios):
        padded[i, :len(a)] = torch.from_numpy(a)
    want, want_lens = whisper_logmel(padded.cuda(), torch.tensor([len(a) for a in audios]).cuda(),
                                     config)
    assert torch.equal(feats, want) and torch.equal(lens, want_lens)
