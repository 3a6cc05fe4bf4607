"""Zipformer2 encoder against icefall's (the ``zipformer`` package) on small random weights:
the upstream modules are built, their state dict (icefall's ``encoder_embed.*`` /
``encoder.*`` keys) is loaded into ours, and the outputs must agree to fp32 tolerance.

Ours decodes each row of a batch as icefall decodes that utterance alone (icefall's own batched
forward lets a short row's last frames read what pads it), so every row is compared with
upstream's forward of that row alone."""

from __future__ import annotations

import pytest
import torch

from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.encoder import ZipformerEncoder

TINY = dict(feature_dim=20, downsampling_factor=(1, 2, 4, 2), encoder_dim=(16, 24, 32, 24),
            num_encoder_layers=(1, 1, 2, 1), query_head_dim=8, pos_head_dim=4,
            value_head_dim=4, num_heads=(2, 2, 4, 2), feedforward_dim=(32, 48, 64, 48),
            cnn_module_kernel=(7, 5, 3, 5), pos_dim=16, layer1_channels=4, layer2_channels=8,
            layer3_channels=16)


def upstream_encoder(up, cfg: ZipformerConfig, seed: int, chunk: int = -1,
                     left: int = -1) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Module()
    m.encoder_embed = up.subsampling.Conv2dSubsampling(
        cfg.feature_dim, cfg.encoder_dim[0], cfg.layer1_channels, cfg.layer2_channels,
        cfg.layer3_channels, dropout=0.0)
    m.encoder = up.zipformer.Zipformer(
        downsampling_factor=cfg.downsampling_factor, encoder_dim=cfg.encoder_dim,
        num_encoder_layers=cfg.num_encoder_layers, encoder_unmasked_dim=cfg.encoder_dim,
        query_head_dim=cfg.query_head_dim, pos_head_dim=cfg.pos_head_dim,
        value_head_dim=cfg.value_head_dim, num_heads=cfg.num_heads,
        feedforward_dim=cfg.feedforward_dim, cnn_module_kernel=cfg.cnn_module_kernel,
        pos_dim=cfg.pos_dim, dropout=0.0, causal=cfg.causal, chunk_size=[chunk],
        left_context_frames=[left])
    with torch.no_grad():  # every parameter random (many start at 0 or 0.5 upstream)
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return m.eval()


def upstream_forward(m, feats, lens):
    x, x_lens = m.encoder_embed(feats, lens)
    pad = torch.arange(x.shape[1]).unsqueeze(0) >= x_lens.unsqueeze(1)
    out, out_lens = m.encoder(x.permute(1, 0, 2), x_lens, pad)
    return out.permute(1, 0, 2), out_lens


def ours_from(m, cfg) -> ZipformerEncoder:
    from oasr.models.zipformer.converters import encoder_state_dict

    enc = ZipformerEncoder(cfg)
    enc.load_state_dict(encoder_state_dict(m.state_dict()), strict=True)
    return enc.eval()


def upstream_alone(m, feats, lens):
    """icefall's forward of each row alone: [(T'_b, C)]."""
    rows = []
    for b in range(feats.shape[0]):
        n = int(lens[b])
        out, out_lens = upstream_forward(m, feats[b:b + 1, :n], lens[b:b + 1])
        rows.append(out[0, :int(out_lens[0])])
    return rows


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_encoder_matches_icefall(up, causal, seed):
    cfg = ZipformerConfig(**TINY, causal=causal)
    m = upstream_encoder(up, cfg, seed)
    enc = ours_from(m, cfg)
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(3, 61, cfg.feature_dim, generator=g)
    lens = torch.tensor([61, 45, 30])
    with torch.no_grad():
        refs = upstream_alone(m, feats, lens)
        # A causal checkpoint decodes with its chunk mask by default; -1 is whole-utterance.
        got, got_lens = enc(feats, lens, chunk_size=-1, left_context_frames=-1)
    assert got_lens.tolist() == [r.shape[0] for r in refs]
    for b, ref in enumerate(refs):
        torch.testing.assert_close(got[b, :ref.shape[0]], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("chunk,left", [(8, 16), (4, -1)])
def test_chunk_masked_causal_encoder_matches_icefall(up, chunk, left):
    """icefall's chunked decoding: the chunk mask and chunk-causal convolutions."""
    cfg = ZipformerConfig(**TINY, causal=True)
    m = upstream_encoder(up, cfg, 2, chunk, left)
    enc = ours_from(m, cfg)
    g = torch.Generator().manual_seed(2)
    feats = torch.randn(2, 81, cfg.feature_dim, generator=g)
    lens = torch.tensor([81, 64])
    with torch.no_grad():
        refs = upstream_alone(m, feats, lens)
        got, _ = enc(feats, lens, chunk_size=chunk, left_context_frames=left)
        full, _ = enc(feats, lens, chunk_size=-1, left_context_frames=-1)
        enc.configure_chunks(chunk, left)
        configured, _ = enc(feats, lens)
    for b, ref in enumerate(refs):
        torch.testing.assert_close(got[b, :ref.shape[0]], ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(configured, got, rtol=0, atol=0)
    n = refs[0].shape[0]
    assert not torch.allclose(got[0, :n], full[0, :n], atol=1e-3), "the chunk mask changed nothing"


@pytest.mark.parametrize("causal", [False, True])
def test_rows_do_not_depend_on_the_batch(causal):
    """A row's output is its output alone, whatever pads it (zeros, log(1e-10), noise)."""
    cfg = ZipformerConfig(**TINY, causal=causal)
    torch.manual_seed(5)
    enc = ZipformerEncoder(cfg)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    enc.eval()
    g = torch.Generator().manual_seed(5)
    feats = torch.randn(3, 97, cfg.feature_dim, generator=g)
    lens = torch.tensor([97, 58, 23])
    with torch.no_grad():
        for fill in (0.0, -23.0, None):
            padded = feats.clone()
            for b, n in enumerate(lens.tolist()):
                padded[b, n:] = torch.randn(97 - n, cfg.feature_dim) if fill is None else fill
            got, got_lens = enc(padded, lens)
            for b, n in enumerate(lens.tolist()):
                alone, alone_lens = enc(feats[b:b + 1, :n], lens[b:b + 1])
                assert int(got_lens[b]) == int(alone_lens[0])
                # fp32 reductions over other shapes: measured <= 1.6e-5
                torch.testing.assert_close(got[b, :int(alone_lens[0])], alone[0],
                                           rtol=1e-4, atol=1e-4)
