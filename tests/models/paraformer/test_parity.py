"""Paraformer against FunASR 1.4.16 on a tiny random model in FunASR's layout, converted by
our converter: features, encoder output, CIF alphas and fire frames, tokens."""

from __future__ import annotations

import pytest
import soundfile as sf
import torch

from oasr.features.kaldi import fbank
from oasr.features.lfr import apply_lfr_batch
from oasr.models.registry import build_model_from_checkpoint, detect_converter
from tests.helpers.data import SHARED_DATA
from tests.models.paraformer.funasr_folder import funasr_frontend, write_folder

CLIPS = SHARED_DATA / "librispeech-test-other-70" / "audio"
UTTERANCES = ("1688-142285-0003", "1688-142285-0007")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("funasr_paraformer")
    ref = write_folder(folder)
    ours = build_model_from_checkpoint(folder).eval()
    return folder, ref, ours


def _speech(utt: str) -> torch.Tensor:
    path = CLIPS / f"{utt}.flac"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    wav, _ = sf.read(path, dtype="float32")
    return torch.from_numpy(wav[:16000 * 4])


def _funasr_features(folder, wavs):
    frontend = funasr_frontend(folder)
    lens = torch.tensor([len(w) for w in wavs])
    padded = torch.nn.utils.rnn.pad_sequence(wavs, batch_first=True)
    with torch.no_grad():
        return frontend(padded, lens)


def _our_features(ours, folder, wavs):
    conv = detect_converter(folder)
    fc = conv.build_feature_config(ours.config)
    lens = torch.tensor([len(w) for w in wavs])
    padded = torch.nn.utils.rnn.pad_sequence(wavs, batch_first=True)
    feats, flens = fbank(padded, lens, fc)
    return apply_lfr_batch(feats, flens, fc.lfr_m, fc.lfr_n)


def test_converter_detects_the_funasr_folder(pair):
    folder, _, ours = pair
    conv = detect_converter(folder)
    assert (conv.architecture, conv.source_format) == ("paraformer", "funasr")
    assert ours.config.encoder_layers == 3 and ours.config.decoder_att_layers == 2


@pytest.mark.parametrize("utt", UTTERANCES)
def test_lfr_features_then_am_mvn_match_funasr(pair, utt):
    folder, _, ours = pair
    wav = _speech(utt)
    ref, ref_lens = _funasr_features(folder, [wav])
    feats, lens = _our_features(ours, folder, [wav])
    normed = (feats + ours.cmvn_shift) * ours.cmvn_scale
    assert normed.shape == ref.shape and torch.equal(lens, ref_lens.long())
    assert (normed - ref).abs().max() < 2e-3  # log-mel rounding in float32, times the scale


@pytest.mark.parametrize("utt", UTTERANCES)
def test_encoder_cif_and_tokens_match_funasr(pair, utt):
    folder, ref, ours = pair
    wav = _speech(utt)
    feats, lens = _funasr_features(folder, [wav])
    want = ref.infer(feats, lens)
    # Our model applies am.mvn itself: hand it the un-normalised LFR features.
    raw = feats / ours.cmvn_scale - ours.cmvn_shift
    with torch.no_grad():
        hidden, hlens = ours.encode_offline(raw, lens)
        cif = ours.predict(hidden, hlens)
        ids, _ = ours.transcribe_ids(raw, lens)
    assert torch.equal(hlens, want["encoder_lens"])
    assert (hidden - want["encoder"]).abs().max() < 1e-4
    assert cif.alphas.shape == want["alphas"].shape
    assert (cif.alphas - want["alphas"]).abs().max() < 1e-5
    fired = want["peaks"] >= 1.0 - 1e-4  # FunASR's peaks: 1 + fraction at a fire frame
    assert torch.equal(cif.fires, fired)
    assert torch.equal(cif.token_lens, want["token_num"])
    assert want["token_num"].item() > 3  # the CIF fired a real number of tokens
    assert ids == want["ids"]


def test_batched_rows_equal_single_rows(pair):
    folder, _, ours = pair
    wavs = [_speech(UTTERANCES[0]), _speech(UTTERANCES[1])[: 16000 * 2]]
    feats, lens = _our_features(ours, folder, wavs)
    with torch.no_grad():
        batch, _ = ours.transcribe_ids(feats, lens)
        single = [ours.transcribe_ids(feats[i:i + 1, :lens[i]], lens[i:i + 1])[0][0]
                  for i in range(2)]
    assert batch == single
