"""The Conformer against upstream WeNet on tiny random U2 / U2++ models.

Oracle: reference outputs dumped by upstream WeNet's own code (wenet-e2e/wenet, commit
01546996) for the checkpoints in ``tests/fixtures/wenet_tiny/``. No upstream code is in this
repository; the fixtures were made once, outside it, like this:

1. The upstream ``wenet/`` package was exported into a scratch folder. Imports that this
   environment cannot satisfy were stubbed there: ``wenet/__init__.py`` emptied (it pulls the
   CLI and audio I/O), an empty ``whisper.tokenizer.LANGUAGES``, an empty ``torchaudio`` package
   (only names imported at module level; torchaudio itself was never installed or run), and
   ``squeezeformer/conv2d.py``'s imports fixed for this torch. No model code was touched.
2. For each variant a ``train.yaml`` in WeNet's current format was written (encoder
   ``conformer``, WeNet's option names; ``cmvn: global_cmvn`` with a JSON stats file
   ``global_cmvn`` computed from 500 random frames where the variant has CMVN), with
   ``units.txt`` holding ``<blank> 0``, ``<unk> 1``, 27 letters and ``<sos/eos> 29``
   (``output_dim: 30``). The model was built by WeNet's ``init_model`` from that yaml, its
   parameters and BatchNorm statistics were filled from a seeded generator (norm weights near
   1, running variances in [0.5, 1.5], decoder output layers scaled up so hypotheses score
   apart), and ``model.state_dict()`` was saved with ``torch.save`` as ``final.pt`` minus the
   three sinusoidal ``*.pe`` tables (deterministic, and 2 MB; WeNet releases from before they
   became buffers carry none either). The folder was then reloaded through ``init_model`` with
   ``checkpoint=final.pt`` (WeNet's recognize path) and every tensor compared.
3. Fixed random features (B=2 rows of different lengths, 80 bins, the tail of the shorter row
   zeroed) went through ``model._forward_encoder(feats, lens, -1, -1)`` (full context) once
   batched (``batched_*``) and once per utterance with no padding (``encoder_out``,
   ``ctc_log_probs`` = ``model.ctc_logprobs``, ``encoder_lens``). For each row's hypotheses
   (token lists, one empty) and each reverse weight, the per-utterance encoder output went
   through ``model.forward_attention_decoder`` and the per-hypothesis score was formed exactly
   as ``wenet.models.transformer.search.attention_rescoring`` forms it (token log-probs + eos,
   l2r, mixed with the r2l score on the reversed hypothesis by ``reverse_weight``); the
   replica was cross-checked against upstream ``attention_rescoring``'s pick and best score.
   Everything was saved with safetensors as ``reference.safetensors``.

Variants: ``u2pp_conv2d4`` (4x, d_model 32, 2 blocks, kernel 5, BatchNorm, bitransformer 1+1,
CMVN), ``causal_conv2d8`` (8x, d_model 16, causal kernel 5, LayerNorm conv norm, transformer
decoder, no CMVN, dynamic chunk) and ``conv2d6_static_chunk`` (6x, kernel 3, static chunk 3,
bitransformer with 0 r2l blocks).

Our outputs are compared with the per-utterance references: the Conformer is batch-invariant
by design, where WeNet's batched forward lets padding leak into shorter rows (checked below).
"""

from __future__ import annotations

import pytest
import torch

from oasr.models.conformer import CONFORMER
from oasr.models.conformer.config import SUBSAMPLING_LAYERS, ConformerConfig
from oasr.models.conformer.encoder import ConvolutionModule
from oasr.models.conformer.model import ConformerModel
from oasr.models.conformer.subsampling import Conv2dSubsampling, subsampled_lengths
from oasr.models.registry import build_model_from_checkpoint
from tests.models.conformer.wenet_fixtures import (
    VARIANTS,
    fixture_dir,
    reference,
    reference_hyps,
)

ATOL = 1e-5
SCORE_ATOL = 1e-4  # a sum of up to 7 log-probs


@pytest.fixture(scope="module")
def loaded() -> dict[str, tuple[ConformerModel, dict[str, torch.Tensor]]]:
    out = {}
    for v in VARIANTS:
        model = build_model_from_checkpoint(fixture_dir(v), architecture="conformer").eval()
        out[v] = (model, reference(v))
    return out


def _rows_close(ours: torch.Tensor, ref: torch.Tensor, lens: torch.Tensor, atol: float) -> None:
    for b, n in enumerate(lens.tolist()):
        torch.testing.assert_close(ours[b, :n], ref[b, :n], atol=atol, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_encoder_output_matches_wenet(loaded, variant):
    model, ref = loaded[variant]
    with torch.no_grad():
        hidden, lens = model.encode_offline(ref["features"], ref["lengths"])
    assert lens.dtype == torch.int64
    assert torch.equal(lens, ref["encoder_lens"])
    assert hidden.shape[1] == int(ref["encoder_lens"].max())
    _rows_close(hidden, ref["encoder_out"], lens, ATOL)


@pytest.mark.parametrize("variant", VARIANTS)
def test_ctc_log_probs_match_wenet(loaded, variant):
    model, ref = loaded[variant]
    with torch.no_grad():
        log_probs, lens = model.forward_offline(ref["features"], ref["lengths"])
    assert log_probs.dtype == torch.float32
    assert log_probs.shape[-1] == model.config.vocab_size
    assert torch.equal(lens, ref["encoder_lens"])
    _rows_close(log_probs, ref["ctc_log_probs"], lens, ATOL)
    # A log-softmax: every frame's probabilities sum to one.
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]))


@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_scores_match_wenet_rescoring(loaded, variant):
    model, ref = loaded[variant]
    hyps = reference_hyps(ref)
    with torch.no_grad():
        hidden, lens = model.encode_offline(ref["features"], ref["lengths"])
        for r, rw in enumerate(ref["reverse_weights"].tolist()):
            scores = model.attention_scores(hidden, lens, hyps, reverse_weight=rw)
            assert [len(s) for s in scores] == [len(h) for h in hyps]
            for b, row in enumerate(scores):
                expected = ref["attention_scores"][r, b, :len(row)]
                torch.testing.assert_close(torch.tensor(row), expected, atol=SCORE_ATOL, rtol=0)


def test_u2pp_scores_cover_l2r_r2l_and_their_mix(loaded):
    # reverse_weight 0 is the l2r decoder alone, 1 the r2l decoder alone, 0.3 the mix.
    _, ref = loaded["u2pp_conv2d4"]
    assert ref["reverse_weights"].tolist() == pytest.approx([0.0, 0.3, 1.0])
    l2r, mixed, r2l = ref["attention_scores"]
    finite = ~torch.isnan(l2r)
    torch.testing.assert_close(mixed[finite], 0.7 * l2r[finite] + 0.3 * r2l[finite],
                               atol=SCORE_ATOL, rtol=0)
    assert (l2r[finite] - r2l[finite]).abs().max() > 1.0  # the two decoders really differ


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_row_equals_its_unbatched_run(loaded, variant):
    model, ref = loaded[variant]
    feats, lengths = ref["features"], ref["lengths"]
    with torch.no_grad():
        hidden, lens = model.encode_offline(feats, lengths)
        for b, n in enumerate(lengths.tolist()):
            alone, alone_lens = model.encode_offline(feats[b:b + 1, :n], lengths[b:b + 1])
            assert alone_lens.item() == lens[b].item()
            torch.testing.assert_close(hidden[b, :lens[b]], alone[0], atol=ATOL, rtol=0)


def test_wenet_batched_forward_leaks_padding_where_ours_does_not(loaded):
    # Non-causal conv module: WeNet's batched output of the shorter row differs from its own
    # unpadded output (the pointwise bias of padded frames enters the depthwise conv). The
    # causal variant has no such leak, so there batched and unbatched WeNet agree.
    _, ref = loaded["u2pp_conv2d4"]
    short = int(ref["encoder_lens"].argmin())
    n = int(ref["encoder_lens"][short])
    leak = (ref["batched_encoder_out"][short, :n] - ref["encoder_out"][short, :n]).abs().max()
    assert leak > 1e-3
    _, causal = loaded["causal_conv2d8"]
    _rows_close(causal["batched_encoder_out"], causal["encoder_out"], causal["encoder_lens"],
                ATOL)


@pytest.mark.parametrize("variant", VARIANTS)
def test_subsampling_rate_and_right_context_match_wenet(loaded, variant):
    model, ref = loaded[variant]
    assert isinstance(model.encoder.subsampling_rate, int)
    assert model.encoder.subsampling_rate == int(ref["subsampling_rate"])
    assert model.encoder.right_context == int(ref["right_context"])
    assert model.config.subsampling_rate == model.encoder.subsampling_rate


def _wenet_mask_lengths(lengths: list[int], input_layer: str) -> list[int]:
    """WeNet's rule: the subsampled pad mask is the input mask sliced [k-1::s] per conv."""
    t = max(lengths)
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    for kernel, stride in SUBSAMPLING_LAYERS[input_layer]:
        mask = mask[:, kernel - 1::stride]
    return mask.sum(-1).tolist()


@pytest.mark.parametrize("input_layer,rate", [("conv2d", 4), ("conv2d6", 6), ("conv2d8", 8)])
def test_subsampling_output_lengths(input_layer, rate):
    lengths = list(range(1, 64))
    sub = Conv2dSubsampling(20, 8, input_layer).eval()
    assert sub.subsampling_rate == rate
    ours = subsampled_lengths(torch.tensor(lengths), input_layer)
    assert ours.tolist() == _wenet_mask_lengths(lengths, input_layer)
    # The conv stack itself: where the length first becomes 1, one frame before and after each
    # of the next steps, and the longest input.
    steps = [n for n in lengths[1:] if ours[n - 1] != ours[n - 2]][:3]
    probe = sorted({m for n in steps for m in (n - 1, n)} | {lengths[-1]})
    with torch.no_grad():
        for n in probe:
            if ours[n - 1] > 0:
                out, pos = sub(torch.randn(1, n, 20))
                assert out.shape == (1, int(ours[n - 1]), 8)
                assert pos.shape == (out.shape[1], 8)
            else:
                assert n < sub.right_context + 1
    # Asymptotically one output frame per `rate` input frames.
    assert subsampled_lengths(torch.tensor([100 * rate]), input_layer).item() in range(95, 100)


def test_encoder_handles_rows_shorter_than_the_subsampling_window():
    cfg = ConformerConfig(input_dim=16, vocab_size=10, d_model=8, encoder_layers=1,
                          encoder_heads=2, encoder_linear_units=8, cnn_module_kernel=3,
                          decoder="transformer", decoder_layers=1, decoder_heads=2,
                          decoder_linear_units=8)
    model = ConformerModel(cfg).eval()
    with torch.no_grad():
        log_probs, lens = model.forward_offline(torch.randn(2, 30, 16), torch.tensor([30, 5]))
    assert lens.tolist() == [6, 0]
    assert torch.isfinite(log_probs).all()
    with torch.no_grad():
        log_probs, lens = model.forward_offline(torch.randn(2, 4, 16), torch.tensor([4, 2]))
    assert lens.tolist() == [0, 0] and log_probs.shape[0] == 2


def test_causal_convolution_module_never_reads_later_frames():
    torch.manual_seed(0)
    conv = ConvolutionModule(8, 5, "layer_norm", "swish", causal=True, bias=True,
                             norm_eps=1e-5).eval()
    x = torch.randn(2, 12, 8)
    changed = x.clone()
    changed[:, 7:] = torch.randn(2, 5, 8)
    with torch.no_grad():
        a, b = conv(x), conv(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7], atol=0, rtol=0)
    assert not torch.allclose(a[:, 7:], b[:, 7:])
    # Non-causal: a frame sees (kernel - 1) / 2 frames ahead.
    centred = ConvolutionModule(8, 5, "batch_norm", "swish", causal=False, bias=True,
                                norm_eps=1e-5).eval()
    with torch.no_grad():
        a, b = centred(x), centred(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=0, rtol=0)
    assert not torch.allclose(a[:, 5:7], b[:, 5:7])


def test_attention_scores_refusals_and_empty_input(loaded):
    model, ref = loaded["u2pp_conv2d4"]
    with torch.no_grad():
        hidden, lens = model.encode_offline(ref["features"], ref["lengths"])
        assert model.attention_scores(hidden, lens, [[], []], 0.3) == [[], []]
        with pytest.raises(ValueError, match="rows of hypotheses"):
            model.attention_scores(hidden, lens, [[[1]]], 0.0)
        with pytest.raises(ValueError, match="reverse_weight"):
            model.attention_scores(hidden, lens, [[[1]], []], 1.5)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            model.attention_scores(hidden, lens, [[[30]], []], 0.0)
    causal, cref = loaded["causal_conv2d8"]
    with torch.no_grad():
        hidden, lens = causal.encode_offline(cref["features"], cref["lengths"])
        with pytest.raises(ValueError, match="no right-to-left decoder"):
            causal.attention_scores(hidden, lens, [[[1]], [[2]]], 0.5)


def test_interface_attributes(loaded):
    from oasr.models.interfaces import require_capability

    model, ref = loaded["u2pp_conv2d4"]
    for family in CONFORMER.decode_families:
        require_capability(model, family)
    cfg = model.config
    assert model.default_decode_type == "ctc"
    assert (cfg.blank_id, cfg.sos_id, cfg.eos_id, cfg.vocab_size) == (0, 29, 29, 30)
    assert (cfg.sos_id, cfg.eos_id) == (int(ref["sos"]), int(ref["eos"]))


def test_bfloat16_model_stays_close_to_float32(loaded):
    model, ref = loaded["u2pp_conv2d4"]
    half = ConformerModel(model.config).eval()
    half.load_weights(model.state_dict())
    half.to(torch.bfloat16)
    with torch.no_grad():
        log_probs, lens = half.forward_offline(ref["features"].to(torch.bfloat16), ref["lengths"])
    assert log_probs.dtype == torch.float32
    for b, n in enumerate(lens.tolist()):
        agree = (log_probs[b, :n].argmax(-1) == ref["ctc_log_probs"][b, :n].argmax(-1)).float()
        assert agree.mean() > 0.8
        assert (log_probs[b, :n] - ref["ctc_log_probs"][b, :n]).abs().max() < 1.0
