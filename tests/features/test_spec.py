"""``FeatureConfig.complete``: what a bundle records, and how a config recorded before an option
existed reads it."""

from __future__ import annotations

import dataclasses

import torch

from oasr.features import FeatureConfig, build_extractor
from oasr.features.kaldi import FBANK_DEFAULTS, fbank


def test_complete_writes_every_option_out() -> None:
    config = FeatureConfig("fbank", num_mel_bins=40, params={"snip_edges": False})
    full = config.complete()
    assert set(full.params) == set(FBANK_DEFAULTS)
    assert full.params["snip_edges"] is False and full.params["high_freq"] == 0.0
    assert full.complete() == full and config.params == {"snip_edges": False}
    x = torch.randn(2, 5_000) * 0.1
    lengths = torch.tensor([5_000, 3_210])
    a, a_len = fbank(x, lengths, config)
    b, b_len = fbank(x, lengths, full)
    assert torch.equal(a, b) and torch.equal(a_len, b_len)
    whisper = FeatureConfig("whisper_logmel").complete()
    assert whisper.params == build_extractor(whisper).defaults


def test_a_config_recorded_before_snip_edges_keeps_its_frames() -> None:
    """A bundle written before ``snip_edges`` existed stores Kaldi fbank params without it; it
    reads the default, True: the frames it was always computed with."""
    old = {**dataclasses.asdict(FeatureConfig("fbank")), "params": {"audio_scale": 32768.0,
                                                                     "dither": 0.0}}
    config = FeatureConfig(**old)
    x = torch.randn(1, 16_000) * 0.1
    _, lens = fbank(x, torch.tensor([16_000]), config)
    assert lens.tolist() == [(16_000 - 400) // 160 + 1]
    assert config.complete().params["snip_edges"] is True
