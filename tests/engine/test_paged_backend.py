"""The ``paged`` streaming runtime on WeNet Conformers.

Oracles: (1) the model's own offline chunk-masked forward (``encoder(..., chunk_frames,
left_chunks)``, WeNet's ``decoding_chunk_size`` / ``num_decoding_left_chunks`` masking), which a
causal chunk-trained Conformer's chunk-wise path must equal; (2) a straightforward dense
reimplementation, written here, of upstream WeNet's ``ConformerEncoder.forward_chunk``
semantics (attention cache = concatenated K|V per layer cut to ``required_cache_size``, the
convolution cache = the last ``kernel - 1`` inputs of the pointwise conv, positions read from
``offset - cache_size``). The ``wenet`` package itself is not installed in this environment
(its PyPI distribution pulls torchaudio and the CLI stack), so its ``forward_chunk`` is not
called; the fixture checkpoint is upstream's own (``tests/fixtures/wenet_tiny``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oasr.engine.decode.ctc import ctc_search
from oasr.engine.decode.ctc_streaming import CtcGreedyStream, CtcPrefixBeamStream
from oasr.engine.streaming_backend import build_streaming_backend
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.model import ConformerModel
from oasr.models.conformer.subsampling import sinusoid_table
from oasr.models.registry import build_model_from_checkpoint
from tests.models.conformer.wenet_fixtures import fixture_dir, reference

ATOL = 1e-5


@pytest.fixture(scope="module")
def causal() -> ConformerModel:
    return build_model_from_checkpoint(fixture_dir("causal_conv2d8"),
                                       architecture="conformer").eval()


@pytest.fixture(scope="module")
def random_u2pp() -> ConformerModel:
    """4x subsampling, 2 blocks, BatchNorm, macaron, causal kernel 7, dynamic chunk."""
    torch.manual_seed(3)
    cfg = ConformerConfig(input_dim=20, vocab_size=12, d_model=24, encoder_layers=2,
                          encoder_heads=3, encoder_linear_units=40, cnn_module_kernel=7,
                          causal=True, use_dynamic_chunk=True, decoder_layers=1,
                          decoder_linear_units=16)
    model = ConformerModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        model.ctc.ctc_lo.weight.mul_(8.0)  # random logits far apart: varied tokens
    return model


def windows(enc, frames: int):
    """WeNet's chunk-by-chunk feature windows: (start, stop) per chunk."""
    rate, rc = enc.subsampling_rate, enc.right_context
    chunk = enc.streaming_chunk_frames
    win, stride = (chunk - 1) * rate + rc + 1, chunk * rate
    return [(cur, min(cur + win, frames)) for cur in range(0, frames - rc, stride)]


def stream_one(model, feats: torch.Tensor, **backend) -> list[torch.Tensor]:
    be = build_streaming_backend(model, **backend)
    be.allocate(0)
    outs = []
    for a, b in windows(model.encoder, feats.shape[0]):
        out, lens = be.forward_step([0], feats[None, a:b], torch.tensor([b - a]))
        outs.append(out[0, :lens[0]])
    be.free(0)
    assert be.pool.used_blocks == 0
    return outs


def offline(model, feats: torch.Tensor, chunk: int, left: int) -> torch.Tensor:
    with torch.no_grad():
        out, lens = model.encoder(feats[None], torch.tensor([feats.shape[0]]),
                                  chunk_frames=chunk, left_chunks=left)
    return out[0, :lens[0]]


def test_declarations_follow_the_training_config(causal):
    assert causal.encoder.streaming_kind == "paged"
    assert causal.encoder.streaming_state_specs[0].shape == (1, 4, 16)  # layers, k - 1, d
    for variant in ("u2pp_conv2d4", "conv2d6_static_chunk"):  # non-causal conv modules
        m = build_model_from_checkpoint(fixture_dir(variant), architecture="conformer")
        assert m.encoder.streaming_kind == "none"
        with pytest.raises(ValueError, match="streaming_kind='none'"):
            build_streaming_backend(m)


@pytest.mark.parametrize("chunk,left", [(4, -1), (2, 1), (3, 2), (1, 0)])
def test_chunked_equals_offline_chunk_masked(causal, random_u2pp, chunk, left):
    for model, feats in ((causal, reference("causal_conv2d8")["features"][0]),
                         (random_u2pp, torch.randn(97, 20))):
        model.encoder.configure_streaming(chunk, left)
        got = torch.cat(stream_one(model, feats, max_streams=2, block_size=4))
        want = offline(model, feats, chunk, left)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_offline_chunk_mask_is_not_full_context(random_u2pp):
    # The oracle must be able to fail: chunking changes the offline output.
    feats = torch.randn(97, 20)
    diff = offline(random_u2pp, feats, 4, 1) - offline(random_u2pp, feats, 0, -1)
    assert diff.abs().max() > 1e-2


def wenet_forward_chunk(enc, xs, offset, required_cache_size, att_cache, cnn_cache):
    """Dense WeNet ``forward_chunk`` semantics for one utterance (batch 1).

    att_cache: per layer (1, H, cache_t, 2 * D) or empty; cnn_cache: per layer (1, lorder, C)
    or empty -> (out (1, t, C), new att_cache, new cnn_cache)."""
    x = xs if enc.global_cmvn is None else enc.global_cmvn(xs)
    x, _ = enc.embed(x)
    t, d_model = x.shape[1], x.shape[2]
    cache_t = att_cache[0].shape[2] if att_cache else 0
    pos = sinusoid_table(offset + t, d_model)[offset - cache_t: offset + t][None]
    new_att, new_cnn = [], []
    for i, layer in enumerate(enc.encoders):
        a = layer.self_attn
        h, dk = a.heads, a.head_dim
        if layer.feed_forward_macaron is not None:
            x = x + 0.5 * layer.feed_forward_macaron(layer.norm_ff_macaron(x))
        xn = layer.norm_mha(x)
        q = a.linear_q(xn).view(1, t, h, dk).transpose(1, 2)
        k = a.linear_k(xn).view(1, t, h, dk).transpose(1, 2)
        v = a.linear_v(xn).view(1, t, h, dk).transpose(1, 2)
        if att_cache:
            k = torch.cat([att_cache[i][..., :dk], k], dim=2)
            v = torch.cat([att_cache[i][..., dk:], v], dim=2)
        new_att.append(torch.cat([k, v], dim=-1))
        p = a.linear_pos(pos).view(1, -1, h, dk).transpose(1, 2)
        qt = q.transpose(1, 2)
        ac = (qt + a.pos_bias_u).transpose(1, 2) @ k.transpose(-2, -1)
        bd = (qt + a.pos_bias_v).transpose(1, 2) @ p.transpose(-2, -1)
        attn = torch.softmax((ac + bd) / math.sqrt(dk), dim=-1)
        x = x + a.linear_out((attn @ v).transpose(1, 2).reshape(1, t, -1))
        cm = layer.conv_module
        y = layer.norm_conv(x)
        y = torch.cat([cnn_cache[i], y], 1) if cnn_cache else torch.nn.functional.pad(
            y, (0, 0, cm.lorder, 0))
        new_cnn.append(y[:, -cm.lorder:])
        y = cm.depthwise_conv(torch.nn.functional.glu(cm.pointwise_conv1(y), dim=-1))
        x = x + cm.pointwise_conv2(cm.activation(cm.norm(y)))
        x = x + 0.5 * layer.feed_forward(layer.norm_ff(x))
        x = layer.norm_final(x)
    start = max(cache_t + t - required_cache_size, 0) if required_cache_size >= 0 else 0
    return enc.after_norm(x), [c[:, :, start:] for c in new_att], new_cnn


@pytest.mark.parametrize("chunk,left", [(4, -1), (2, 1), (3, 2)])
def test_chunk_outputs_equal_wenet_forward_chunk_semantics(causal, chunk, left):
    enc = causal.encoder
    enc.configure_streaming(chunk, left)
    feats = reference("causal_conv2d8")["features"][0]
    ours = stream_one(causal, feats, max_streams=1, block_size=3)
    att, cnn, offset, theirs = [], [], 0, []
    with torch.no_grad():
        for a, b in windows(enc, feats.shape[0]):
            out, att, cnn = wenet_forward_chunk(enc, feats[None, a:b], offset,
                                                chunk * left, att, cnn)
            offset += out.shape[1]
            theirs.append(out[0])
    assert len(ours) == len(theirs) > 3
    for o, w in zip(ours, theirs):
        torch.testing.assert_close(o, w, atol=ATOL, rtol=0)


@pytest.mark.parametrize("bucket", [False, True])
def test_cohorts_of_streams_of_different_lengths(random_u2pp, bucket):
    """Streams join and leave, skip steps, end on short windows: each equals its offline,
    whether cohorts run at their own width or padded to a power of two with scratch rows."""
    model = random_u2pp
    model.encoder.configure_streaming(3, 1)
    gen = torch.Generator().manual_seed(5)
    feats = [torch.randn(n, 20, generator=gen) for n in (61, 97, 40, 130)]
    be = build_streaming_backend(model, max_streams=3, block_size=2, bucket_cohorts=bucket)
    if bucket:
        assert be.buckets() == [1, 2, 4]
        be.warm_up(9, 20)
        assert be.pool.used_blocks == 0 and not be.slot_of
    todo = {i: windows(model.encoder, f.shape[0]) for i, f in enumerate(feats)}
    outs: dict[int, list[torch.Tensor]] = {i: [] for i in todo}
    step, opened, widths = 0, [], set()
    while any(todo.values()):
        for i in list(todo):
            if todo[i] and i not in opened and len(opened) < 3 and (i < 2 or step > 2):
                be.allocate(i)
                opened.append(i)
        cohort = [i for i in opened if todo[i] and (step + i) % 3]  # some skip a step
        if cohort:
            ws = [todo[i].pop(0) for i in cohort]
            width = max(b - a for a, b in ws)
            x = torch.zeros(len(cohort), width, 20)
            for r, (i, (a, b)) in enumerate(zip(cohort, ws)):
                x[r, :b - a] = feats[i][a:b]
            out, lens = be.forward_step(cohort, x, torch.tensor([b - a for a, b in ws]))
            assert out.shape[0] == len(cohort)
            widths.add(len(cohort))
            for r, i in enumerate(cohort):
                outs[i].append(out[r, :lens[r]])
        for i in [i for i in opened if not todo[i]]:
            be.free(i)
            opened.remove(i)
        step += 1
    assert be.pool.used_blocks == 0
    assert 3 in widths  # a cohort the buckets pad (3 -> 4)
    for i, f in enumerate(feats):
        torch.testing.assert_close(torch.cat(outs[i]), offline(model, f, 3, 1), atol=ATOL,
                                   rtol=0)


def test_windowed_stream_holds_bounded_blocks(random_u2pp):
    model = random_u2pp
    model.encoder.configure_streaming(2, 2)  # window 4 frames
    be = build_streaming_backend(model, max_streams=1, block_size=2)
    be.allocate(0)
    held = []
    feats = torch.randn(400, 20)
    for a, b in windows(model.encoder, 400):
        be.forward_step([0], feats[None, a:b])
        held.append(be.pages.held_blocks(0))
    assert be.frames(0) == offline(model, feats, 2, 2).shape[0]
    assert max(held) <= math.ceil((4 + 2) / 2) + 1 < be.frames(0) // 2


@pytest.mark.parametrize("beam", [1, 4])
def test_ctc_across_chunks_equals_offline_chunk_masked_decoding(random_u2pp, beam):
    model = random_u2pp
    model.encoder.configure_streaming(4, -1)
    feats = torch.randn(160, 20, generator=torch.Generator().manual_seed(9))
    want_lp = model.ctc_log_probs(offline(model, feats, 4, -1)[None]).detach().numpy()
    want = ctc_search(want_lp, np.array([want_lp.shape[1]]), 0, beam, 1.0, 1)[0][0]
    search = CtcGreedyStream(0) if beam == 1 else CtcPrefixBeamStream(beam, 0)
    with torch.no_grad():
        for chunk_out in stream_one(model, feats, max_streams=1, block_size=4):
            search.feed(model.ctc_log_probs(chunk_out[None])[0].numpy())
    got = search.best()
    assert len(want.tokens) >= 5  # random weights still emit tokens: the check can fail
    assert got.tokens == list(want.tokens)
    assert got.frames == list(want.frames)
    if beam > 1:
        assert got.score == pytest.approx(want.score, abs=1e-4)


def test_prefix_beam_stream_equals_offline_on_random_log_probs():
    gen = np.random.default_rng(0)
    for _ in range(5):
        logits = gen.normal(size=(40, 6)) * 3
        lp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
        want = ctc_search(lp[None], np.array([40]), 0, 3, 1.0, 3)[0]
        s = CtcPrefixBeamStream(3, 0)
        for a in range(0, 40, 7):
            s.feed(lp[a:a + 7])
        got = s.nbest(3)
        assert [h.tokens for h in got] == [list(h.tokens) for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
