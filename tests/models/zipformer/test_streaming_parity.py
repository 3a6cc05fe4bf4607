"""Chunk-wise streaming of a causal Zipformer's stacks against icefall's
``Zipformer.streaming_forward``: the same embedded frames fed chunk by chunk, with the caches
threaded across chunks and icefall's padding mask over cached frames, must give upstream's
outputs chunk for chunk; the subsampler's ConvNeXt cache likewise."""

from __future__ import annotations

import pytest
import torch

from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.encoder import Zipformer2
from tests.models.zipformer.test_encoder_parity import TINY, upstream_encoder


def padding_mask(processed: torch.Tensor, lens: torch.Tensor, left: int, chunk: int
                 ) -> torch.Tensor:
    """icefall's streaming mask: cached frames not yet seen, then the chunk's padding."""
    seen = (processed.unsqueeze(1) <= torch.arange(left).expand(len(lens), left)).flip(1)
    pad = torch.arange(chunk).unsqueeze(0) >= lens.unsqueeze(1)
    return torch.cat([seen, pad], dim=1)


@pytest.mark.parametrize("chunk,left", [(8, 16), (16, 32)])
def test_chunked_stacks_match_icefall_streaming_forward(up, chunk, left):
    cfg = ZipformerConfig(**TINY, causal=True)
    m = upstream_encoder(up, cfg, 3, chunk, left)
    stacks = Zipformer2(cfg)
    stacks.load_state_dict({k[len("encoder."):]: v for k, v in m.state_dict().items()
                            if k.startswith("encoder.")}, strict=True)
    stacks.eval()
    g = torch.Generator().manual_seed(3)
    total, lens = 48, torch.tensor([48, 37])
    x = torch.randn(total, 2, cfg.encoder_dim[0], generator=g)
    ref_states = m.encoder.get_init_states(2)
    our_states = stacks.init_states(2, left, x.device)
    processed = torch.zeros(2, dtype=torch.int64)
    with torch.no_grad():
        for start in range(0, total, chunk):
            n = (lens - start).clamp(0, chunk)
            mask = padding_mask(processed, n, left, chunk)
            piece = x[start:start + chunk]
            ref, _, ref_states = m.encoder.streaming_forward(piece, n, ref_states, mask)
            got, our_states = stacks.streaming_forward(piece, our_states, left, mask)
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
            processed = processed + n
    assert len(our_states) == len(ref_states)


def test_subsampler_streaming_matches_icefall(up):
    from oasr.models.zipformer.encoder import ZipformerEncoder

    cfg = ZipformerConfig(**TINY, causal=True)
    m = upstream_encoder(up, cfg, 4, 8, 16)
    enc = ZipformerEncoder(cfg)
    from oasr.models.zipformer.converters import encoder_state_dict

    enc.load_state_dict(encoder_state_dict(m.state_dict()), strict=True)
    enc.eval()
    g = torch.Generator().manual_seed(4)
    ref_cache = m.encoder_embed.get_init_states(2)
    cache = enc.embed.init_state(2, torch.device("cpu"))
    assert cache.shape == ref_cache.permute(0, 2, 3, 1).shape
    with torch.no_grad():
        for _ in range(3):  # caches threaded across chunks
            feats = torch.randn(2, 45, cfg.feature_dim, generator=g)
            lens = torch.tensor([45, 45])
            ref, ref_lens, ref_cache = m.encoder_embed.streaming_forward(feats, lens, ref_cache)
            got, got_lens, cache = enc.embed.streaming_forward(feats, lens, cache)
            assert torch.equal(got_lens, ref_lens)
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(cache, ref_cache.permute(0, 2, 3, 1), rtol=1e-4,
                                       atol=1e-4)
