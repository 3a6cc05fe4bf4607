"""Chunk-by-chunk fbank / mfcc (then the flush at the input's end) equal the offline features
over random chunkings, with and without snip_edges."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.features import FeatureConfig, build_extractor
from oasr.features.kaldi import fbank, kaldi_framing
from oasr.features.kaldi_specs import FBANK
from oasr.features.streaming import FramingState, flush_frames, stream_frames


def _chunks(n: int, rng: np.random.Generator) -> list[int]:
    """Random chunk sizes summing to ``n``: empties, single samples and long runs mixed."""
    sizes, left = [], n
    while left > 0:
        kind = rng.integers(0, 4)
        size = {0: 0, 1: 1, 2: int(rng.integers(2, 400)), 3: int(rng.integers(400, 5000))}[kind]
        size = min(size, left)
        sizes.append(size)
        left -= size
    return sizes


def _stream(config: FeatureConfig, wave: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    spec = build_extractor(config)
    framing = kaldi_framing(config)
    state, pieces, at = None, [], 0
    for size in sizes:
        feats, state = spec.streaming_fn(wave[at:at + size], state, config)
        assert feats.dim() == 2
        pieces.append(feats)
        at += size
        assert state.samples == at
        # pending holds the samples from the next frame's first one on (centred frames: the
        # reflected head before sample 0 counts once frame 0 is out)
        head = framing.prefill if getattr(state, "started", True) else 0
        assert state.frames * framing.hop + state.pending.shape[0] == at + head
    pieces.append(spec.flush_fn(state, config))
    return torch.cat(pieces)


@pytest.mark.parametrize("kind,params,rate,seed", [
    ("fbank", {"audio_scale": 32768.0}, 16000, 0),
    ("fbank", {"use_energy": True}, 16000, 1),
    ("mfcc", {}, 16000, 2),
    ("mfcc", {}, 8000, 3),
    ("fbank", {"snip_edges": False, "high_freq": -400.0}, 16000, 4),
    ("mfcc", {"snip_edges": False}, 8000, 5),
])
def test_random_chunkings_equal_offline(kind: str, params: dict, rate: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    config = FeatureConfig(kind, sample_rate=rate, params=params)
    wave = torch.from_numpy((rng.standard_normal(23_457) * 0.1).astype(np.float32))
    whole, lens = build_extractor(config).fn(wave[None], torch.tensor([len(wave)]), config)
    for _ in range(3):
        sizes = _chunks(len(wave), rng)
        streamed = _stream(config, wave, sizes)
        assert streamed.shape == whole[0, : int(lens[0])].shape
        torch.testing.assert_close(streamed, whole[0], atol=1e-4, rtol=1e-5)


def test_one_sample_chunks_and_empty_stream() -> None:
    config = FeatureConfig("fbank")
    wave = torch.randn(1_300) * 0.1
    whole, _ = fbank(wave[None], torch.tensor([len(wave)]), config)
    streamed = _stream(config, wave, [1] * len(wave))
    torch.testing.assert_close(streamed, whole[0], atol=1e-4, rtol=1e-5)
    # Shorter than one frame: no feature, the right width, everything pending.
    feats, state = FBANK.streaming_fn(wave[:399], None, config)
    assert feats.shape == (0, 80) and state.pending.shape == (399,) and state.frames == 0
    feats, state = FBANK.streaming_fn(wave[:0], state, config)
    assert feats.shape == (0, 80) and state.samples == 399
    assert flush_frames(state).pending.shape == (0,)


def test_pending_stays_below_one_frame() -> None:
    config = FeatureConfig("fbank")
    framing = kaldi_framing(config)
    state = FramingState()
    for size in (5_000, 161, 37, 4_000):
        _, state = stream_frames(fbank, framing, config, torch.randn(size), state)
        assert state.pending.shape[0] < framing.span


def test_dither_is_refused() -> None:
    config = FeatureConfig("fbank", params={"dither": 1.0})
    with pytest.raises(ValueError, match="dither"):
        FBANK.streaming_fn(torch.zeros(800), None, config)


@pytest.mark.parametrize("n", [0, 1, 119, 279, 280, 281, 559, 4_321])
def test_centred_streams_of_any_length_flush_to_offline(n: int) -> None:
    """Without snip_edges the last frames read past the end: they come out of the flush, and
    a stream too short for frame 0 comes out of it whole."""
    config = FeatureConfig("fbank", params={"snip_edges": False})
    wave = torch.from_numpy((np.random.default_rng(n).standard_normal(n) * 0.1)
                            .astype(np.float32))
    whole, lens = fbank(wave[None], torch.tensor([n]), config)
    for sizes in ([n], [1] * n, [n // 3, n - n // 3]):
        streamed = _stream(config, wave, sizes)
        assert streamed.shape == whole[0, :int(lens[0])].shape
        torch.testing.assert_close(streamed, whole[0, :int(lens[0])], atol=1e-4, rtol=1e-5)
    assert FBANK.flush_fn(None, config).shape == (0, 80)
