"""whisper_logmel against transformers' WhisperFeatureExtractor (the oracle), and mel filters
against transformers.audio_utils.mel_filter_bank."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oasr.features import FeatureConfig, build_extractor
from oasr.features.mel import hann_window, mel_filters, mel_filters_np, stft_power
from oasr.features.whisper_logmel import WHISPER_LOGMEL, whisper_logmel
from tests.helpers.data import SHARED_DATA

transformers = pytest.importorskip("transformers")
from transformers import WhisperFeatureExtractor  # noqa: E402
from transformers.audio_utils import mel_filter_bank  # noqa: E402

SPEECH_DIR = SHARED_DATA / "librispeech-test-other-70/audio"
SPEECH_IDS = ["1688-142285-0000", "1688-142285-0002", "1998-15444-0000"]
WINDOW = 480000


def _speech() -> list[np.ndarray]:
    import soundfile as sf

    waves = []
    for utt in SPEECH_IDS:
        path = SPEECH_DIR / f"{utt}.flac"
        if not path.exists():
            pytest.skip(f"{path} is not present")
        x, sr = sf.read(path, dtype="float32")
        assert sr == 16000
        waves.append(x)
    return waves


def _noise() -> list[np.ndarray]:
    rng = np.random.default_rng(1234)
    # Odd lengths: shorter than a frame, around a hop, mid-window, past the window (trimmed).
    return [
        (rng.standard_normal(n) * scale).astype(np.float32)
        for n, scale in [(1, 0.5), (159, 0.1), (161, 0.2), (12345, 0.05), (WINDOW + 77, 0.3)]
    ]


def _batch(waves: list[np.ndarray], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad into (B, T); ``fill`` in the padding checks that samples past ``lengths`` are unused."""
    longest = max(len(w) for w in waves)
    x = torch.full((len(waves), longest), fill, dtype=torch.float32)
    for i, w in enumerate(waves):
        x[i, : len(w)] = torch.from_numpy(w)
    return x, torch.tensor([len(w) for w in waves])


@pytest.fixture(scope="module")
def waves() -> list[np.ndarray]:
    return _speech() + _noise()


@pytest.fixture(scope="module")
def ours(waves: list[np.ndarray]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Our batched output per n_mels; the padding holds junk that must not leak in."""
    x, lengths = _batch(waves, fill=0.7)
    return {
        n: whisper_logmel(x, lengths, FeatureConfig("whisper_logmel", num_mel_bins=n))
        for n in (80, 128)
    }


@pytest.mark.parametrize("n_mels", [80, 128])
def test_matches_transformers(waves: list[np.ndarray], ours, n_mels: int) -> None:
    fe = WhisperFeatureExtractor(feature_size=n_mels)
    feats, feat_lengths = ours[n_mels]
    assert feats.shape == (len(waves), 3000, n_mels) and feats.dtype == torch.float32
    worst_torch = worst_f64 = 0.0
    for i, w in enumerate(waves):
        ref = fe(w, sampling_rate=16000, return_tensors="np", return_attention_mask=True)
        # transformers' default path (torch float32 STFT), native layout (n_mels, 3000).
        expected = ref["input_features"][0].T
        worst_torch = max(worst_torch, float(np.abs(feats[i].numpy() - expected).max()))
        assert int(feat_lengths[i]) == int(ref["attention_mask"][0].sum())
        if len(w) < 10000:
            continue  # the slow float64 oracle on the speech rows and the long noise rows
        # Its numpy path: float64 STFT and mel on the same padded row.
        padded = np.zeros(WINDOW, dtype=np.float32)
        padded[: min(len(w), WINDOW)] = w[:WINDOW]
        expected64 = fe._np_extract_fbank_features(padded[None], "cpu")[0].T
        worst_f64 = max(worst_f64, float(np.abs(feats[i].numpy() - expected64).max()))
    print(
        f"\nn_mels={n_mels}: max |ours - HF torch fp32| = {worst_torch:.3g}, "
        f"max |ours - HF numpy fp64| = {worst_f64:.3g}"
    )
    assert worst_torch < 1e-6
    # float32 STFT rounding in near-floor bins, amplified by log10; HF's own two paths differ
    # by the same amount.
    assert worst_f64 < 1e-4


def test_batched_rows_equal_rows_alone(waves: list[np.ndarray], ours) -> None:
    config = FeatureConfig("whisper_logmel")
    feats, feat_lengths = ours[80]
    for i in (1, 3, 5, 7):  # short speech, one-sample, mid-length and over-long noise
        w = waves[i]
        alone, alone_len = whisper_logmel(torch.from_numpy(w)[None], torch.tensor([len(w)]), config)
        torch.testing.assert_close(feats[i], alone[0], atol=1e-6, rtol=0)
        assert int(feat_lengths[i]) == int(alone_len[0])


def test_feat_lengths_count_frames_over_real_audio() -> None:
    lengths = [0, 1, 159, 160, 161, 16000, WINDOW - 1, WINDOW, WINDOW + 1, 2 * WINDOW]
    x = torch.zeros(len(lengths), WINDOW + 2)  # lengths past T are clamped like past the window
    _, feat_lengths = whisper_logmel(x, torch.tensor(lengths), FeatureConfig("whisper_logmel"))
    assert feat_lengths.dtype == torch.int64
    assert feat_lengths.tolist() == [min(math.ceil(n / 160), 3000) for n in lengths]


def test_silence_sits_at_the_floor() -> None:
    feats, _ = whisper_logmel(
        torch.zeros(2, 1000), torch.tensor([1000, 0]), FeatureConfig("whisper_logmel")
    )
    # log10(1e-10) = -10 everywhere, so the peak clamp is idle and (x + 4) / 4 = -1.5.
    assert torch.all(feats == -1.5)


def test_dtype_device_and_empty_batch() -> None:
    config = FeatureConfig("whisper_logmel")
    w = torch.randn(1, 8000, dtype=torch.float64) * 0.1
    f64, _ = whisper_logmel(w, torch.tensor([8000]), config)
    f32, _ = whisper_logmel(w.float(), torch.tensor([8000]), config)
    assert f64.dtype == torch.float32
    torch.testing.assert_close(f64, f32, atol=1e-6, rtol=0)
    empty, empty_len = whisper_logmel(
        torch.zeros(0, 100), torch.zeros(0, dtype=torch.int64), config
    )
    assert empty.shape == (0, 3000, 80) and empty_len.shape == (0,)


def test_rejects_bad_shapes() -> None:
    config = FeatureConfig("whisper_logmel")
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        whisper_logmel(torch.zeros(100), torch.tensor([100]), config)
    with pytest.raises(ValueError, match="lengths"):
        whisper_logmel(torch.zeros(2, 100), torch.tensor([100]), config)


def test_window_comes_from_config() -> None:
    config = FeatureConfig("whisper_logmel", params={"chunk_seconds": 30})
    assert config.fixed_window_seconds == 30.0
    assert config.fixed_window_frames == 3000
    assert FeatureConfig("whisper_logmel").fixed_window_seconds == 30.0  # the spec's default
    short = FeatureConfig("whisper_logmel", params={"chunk_seconds": 10})
    feats, lens = whisper_logmel(torch.ones(1, 200000) * 0.01, torch.tensor([200000]), short)
    assert feats.shape == (1, short.fixed_window_frames, 80) == (1, 1000, 80)
    assert lens.tolist() == [1000]


def test_registered_spec() -> None:
    config = FeatureConfig("whisper_logmel")
    assert build_extractor(config) is WHISPER_LOGMEL
    assert WHISPER_LOGMEL.fn is whisper_logmel
    assert not WHISPER_LOGMEL.supports_streaming
    assert WHISPER_LOGMEL.window_seconds_attr == "chunk_seconds"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(waves: list[np.ndarray]) -> None:
    config = FeatureConfig("whisper_logmel", num_mel_bins=128)
    x, lengths = _batch(waves)
    x, lengths = x[:4], lengths[:4]
    cpu, cpu_len = whisper_logmel(x, lengths, config)
    gpu, gpu_len = whisper_logmel(x.cuda(), lengths.cuda(), config)
    assert gpu.device.type == "cuda" and gpu_len.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=0)  # cuFFT vs pocketfft: ~1e-5
    assert gpu_len.cpu().tolist() == cpu_len.tolist()
    # TF32 GEMMs and autocast, as a model may run with, leave the features as they were.
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fast, _ = whisper_logmel(x.cuda(), lengths.cuda(), config)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, gpu, atol=1e-5, rtol=0)


# -- mel.py ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sr", "n_fft", "n_mels", "f_min", "f_max", "norm", "scale"),
    [
        (16000, 400, 80, 0.0, 8000.0, "slaney", "slaney"),
        (16000, 400, 128, 0.0, 8000.0, "slaney", "slaney"),
        (16000, 512, 64, 125.0, 7500.0, None, "htk"),
        (22050, 1024, 40, 30.0, 11025.0, "slaney", "htk"),
        (8000, 256, 23, 20.0, 3800.0, None, "slaney"),
    ],
)
def test_mel_filters_match_transformers(sr, n_fft, n_mels, f_min, f_max, norm, scale) -> None:
    expected = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=f_min,
        max_frequency=f_max,
        sampling_rate=sr,
        norm=norm,
        mel_scale=scale,
    )
    ours = mel_filters_np(sr, n_fft, n_mels, f_min, f_max, norm=norm, mel_scale=scale)
    assert ours.shape == (n_fft // 2 + 1, n_mels)
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-14)
    as_tensor = mel_filters(sr, n_fft, n_mels, f_min, f_max, norm=norm, mel_scale=scale)
    assert as_tensor.dtype == torch.float32
    np.testing.assert_allclose(as_tensor.numpy(), expected, rtol=1e-6, atol=1e-9)


def test_mel_filters_triangular_in_mel_space() -> None:
    expected = mel_filter_bank(
        num_frequency_bins=257,
        num_mel_filters=23,
        min_frequency=20.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm=None,
        mel_scale="htk",
        triangularize_in_mel_space=True,
    )
    ours = mel_filters_np(
        16000, 512, 23, 20.0, 8000.0, norm=None, mel_scale="htk", triangular_in_mel=True
    )
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-14)


def test_mel_filters_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="mel_scale"):
        mel_filters_np(16000, 400, 80, mel_scale="kaldi-ish")
    with pytest.raises(ValueError, match="norm"):
        mel_filters_np(16000, 400, 80, norm="area")
    with pytest.raises(ValueError, match="f_max"):
        mel_filters_np(16000, 400, 80, f_max=9000.0)


def test_stft_power_matches_a_direct_dft() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 1000))
    n_fft, hop = 64, 16
    power = stft_power(torch.from_numpy(x).float(), n_fft, hop, hann_window(n_fft))
    assert power.shape == (2, 1000 // hop + 1, n_fft // 2 + 1)
    # Independent reference: reflect-pad, frame, window, rfft in float64.
    padded = np.pad(x, ((0, 0), (n_fft // 2, n_fft // 2)), mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = np.stack([padded[:, i * hop : i * hop + n_fft] for i in range(power.shape[1])], 1)
    expected = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    np.testing.assert_allclose(power.numpy(), expected, rtol=1e-4, atol=1e-4)
