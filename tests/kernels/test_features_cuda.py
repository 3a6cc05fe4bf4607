"""``features_cuda``: the GPU Kaldi (fbank, mfcc) and Whisper log-mel frontends against the torch
extractors on the CPU (``oasr.features.kaldi`` / ``whisper_logmel``, themselves checked against
kaldi-native-fbank and transformers in tests/features).

Tolerances, max abs difference:
- Kaldi log-mel <= 2e-3: both paths cut identical fp32 frames (the kernel rounds each op as torch
  does) and take a float64 FFT, but the DC mean is summed in another order and cuFFT is not
  pocketfft; a band ~1e-11 below its frame's peak moves by 1e-2 in log per ulp of frame
  rounding, so the test audio carries a noise floor (as recorded speech does) that keeps bands
  within ~1e-8 of the peak. Measured on an H200: <= 9.2e-4 (white noise, 128 bins, Blackman,
  magnitude: a band near a zero of the noise spectrum; rounding only the DC mean differently
  moves the CPU path by the same amount), <= 8.5e-4 on the speech-like rows.
- MFCC <= 5e-3: the DCT sums all bands' log-mel differences with weights up to sqrt(2 / n_mels)
  times the lifter (up to 1 + 22 / 2).
- Whisper <= 1e-3 after normalization: both STFTs run in float32, with rounding ~1e-7 of a
  frame's energy; the row clamp keeps only bands within 8 decades of the row's peak, where that
  is < 1e-3 relative, i.e. < 1e-4 once log10 and / 4 are applied. Measured: <= 6.3e-5.
- Frame counts exactly equal. Outputs start as NaN, so an element no kernel wrote fails.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
import torch

from oasr import ops
from oasr.features import FeatureConfig
from oasr.features.kaldi import fbank, fbank_native, kaldi_filters, mfcc, mfcc_native
from oasr.features.mel import mel_filters
from oasr.features.whisper_logmel import whisper_logmel, whisper_logmel_native
from oasr.kernels import features_cuda, jit

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

KALDI_LENGTHS = [1, 250, 399, 400, 401, 561, 4_321, 16_007, 24_000]  # < one frame .. 1.5 s
FILL = 0.5  # in the padding past each row's length: it must not leak into any feature


@pytest.fixture(autouse=True)
def _routing():
    ops.reset_counts()
    ops.set_backend("oasr")
    yield
    ops.set_backend(None)
    ops.reset_counts()


def _audio(kind: str, lengths: list[int], sr: int = 16000, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = []
    for n in lengths:
        if kind == "noise":
            rows.append((0.1 * rng.standard_normal(n)).astype(np.float32))
            continue
        # Speech-like: five partials under a syllable-rate envelope, over a noise floor 30 dB
        # below them (clean synthetic tones would leave bands below fp32 rounding: see above).
        t = np.arange(n) / sr
        w = 0.01 * rng.standard_normal(n)
        for _ in range(5):
            f, a = rng.uniform(80, 0.45 * sr), rng.uniform(0.02, 0.3)
            envelope = 1.0 + 0.5 * np.sin(2 * np.pi * rng.uniform(2, 6) * t)
            w += a * envelope * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
        rows.append(w.astype(np.float32))
    return rows


def _batch(rows: list[np.ndarray], width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    width = width or max(len(r) for r in rows)
    x = torch.full((len(rows), width), FILL, dtype=torch.float32)
    for i, r in enumerate(rows):
        x[i, : min(len(r), width)] = torch.from_numpy(r[:width])
    return x, torch.tensor([len(r) for r in rows])


@pytest.fixture
def poisoned(monkeypatch):
    """Every buffer the kernels fill starts as NaN."""
    def nan_empty(shape, *, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(features_cuda, "_empty", nan_empty)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
    assert not a.isnan().any(), "a kernel left an output element unwritten (NaN)"
    return float((a.cpu() - b).abs().max()) if a.numel() else 0.0


# -- without a GPU -------------------------------------------------------------------------------


def test_library_compiles_for_sm90(monkeypatch, tmp_path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    monkeypatch.setenv("OASR_CUDA_ARCH", "sm_90")
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path))
    from oasr.ops.build import FEATURES_CUDA

    lib = jit.build(FEATURES_CUDA)
    assert lib.is_file() and lib.is_relative_to(tmp_path)
    loaded = jit.load(FEATURES_CUDA)  # the exported table checked against the declarations
    frames = loaded.oasr_features_kaldi_frames
    assert len(frames.argtypes) == 20 and frames.argtypes[10] is ctypes.c_float
    assert frames.restype is ctypes.c_int


def test_scope_and_declared_gap() -> None:
    assert ops.KERNEL_GAPS["features-large-fft"] == features_cuda.FEATURES_LARGE_FFT
    for config in (FeatureConfig("fbank"), FeatureConfig("mfcc"),
                   FeatureConfig("fbank", sample_rate=48000, num_mel_bins=128),
                   FeatureConfig("fbank", params={"dither": 1.0, "window_type": "sine"}),
                   FeatureConfig("whisper_logmel", num_mel_bins=128)):
        assert features_cuda.supports(config) and features_cuda.gap_for(config) is None
    # 8193 samples -> a 16384-point FFT: 8192 fp64 bins, past one warp's shared memory slice.
    wide = FeatureConfig("fbank", frame_length_ms=512.0625, frame_shift_ms=100.0)
    assert not features_cuda.supports(wide)
    assert features_cuda.gap_for(wide) == "features-large-fft"
    assert features_cuda.supports(FeatureConfig("fbank", frame_length_ms=512.0))  # 8192: fits
    # Bad configs raise as the torch path does, before any routing.
    with pytest.raises(ValueError, match="window_type"):
        features_cuda.supports(FeatureConfig("fbank", params={"window_type": "kaiser"}))
    with pytest.raises(ValueError, match="num_ceps"):
        features_cuda.supports(FeatureConfig("mfcc", num_mel_bins=10))
    with pytest.raises(ValueError, match="n_fft"):
        features_cuda.supports(FeatureConfig("whisper_logmel", params={"chunk_seconds": 0.01}))


class _FakeCuda:
    """Stands in for a CUDA waveform batch: routing reads only ``is_cuda`` in this scope."""

    is_cuda = True


def test_routing_is_counted(monkeypatch) -> None:
    from oasr.features import kaldi
    from oasr.features import whisper_logmel as whisper
    from oasr.ops import dispatch

    monkeypatch.setattr(dispatch, "buildable", lambda spec: True)  # as where nvcc is found
    ops.set_backend("oasr")
    assert kaldi._FBANK.select(_FakeCuda(), FeatureConfig("fbank")) is features_cuda.fbank_cuda
    wide = FeatureConfig("mfcc", frame_length_ms=600.0)
    assert kaldi._MFCC.select(_FakeCuda(), wide) is None
    assert ops.gap_counts() == {("kernel", "fbank"): 1, ("gap", "features-large-fft"): 1}
    ops.set_backend("torch")
    assert whisper._WHISPER_LOGMEL.select(_FakeCuda(), FeatureConfig("whisper_logmel")) is None
    assert ops.gap_counts()[("torch_backend", "whisper_logmel")] == 1
    assert "features-large-fft" in ops.format_gap_report()
    kernels = ops.registered_kernels()
    assert kernels["mfcc"].load().native is kaldi.mfcc_native
    assert kernels["whisper_logmel"].load().native is whisper.whisper_logmel_native


def test_cpu_inputs_take_the_torch_path_out_of_scope() -> None:
    x, lengths = _batch(_audio("noise", [800, 1200]))
    config = FeatureConfig("fbank")
    feats, lens = fbank(x, lengths, config)
    ref, ref_lens = fbank_native(x, lengths, config)
    assert torch.equal(feats, ref) and torch.equal(lens, ref_lens)
    assert ops.gap_counts() == {("out_of_scope", "fbank:cpu"): 1}


@pytest.mark.parametrize("kind", ["kaldi", "whisper"])
def test_packed_filters_are_the_torch_matrix(kind) -> None:
    """The sparse table rebuilds, element for element, the matrix the torch path multiplies by."""
    if kind == "kaldi":
        config = FeatureConfig("fbank", num_mel_bins=128)
        p = features_cuda.kaldi.fbank_params(config)
        dense = kaldi_filters(config, p, 512, "cpu")
        starts, offsets, weights = features_cuda._kaldi_tables(config, p, 512, torch.device("cpu"))
    else:
        config = FeatureConfig("whisper_logmel", num_mel_bins=128)
        dense = mel_filters(16000, 400, 128, 0.0, 8000.0)
        starts, offsets, weights = features_cuda._whisper_tables(config, 400, torch.device("cpu"))
    assert weights.dtype == dense.dtype
    rebuilt = torch.zeros_like(dense)
    for m in range(dense.shape[1]):
        lo, n = int(starts[m]), int(offsets[m + 1] - offsets[m])
        rebuilt[lo:lo + n, m] = weights[int(offsets[m]):int(offsets[m + 1])]
    assert torch.equal(rebuilt, dense)
    assert int(offsets[-1]) < dense.numel() // 10  # sparse: under a tenth of the dense matrix


# -- on a GPU ------------------------------------------------------------------------------------


KALDI_CONFIGS = [
    {},
    {"window_type": "hanning", "preemph_coeff": 0.0},
    {"window_type": "hamming", "use_energy": True, "audio_scale": 32768.0},
    {"window_type": "rectangular", "remove_dc_offset": False, "raw_energy": False,
     "use_energy": True, "energy_floor": 1.0},
    {"window_type": "blackman", "use_power": False},
    {"window_type": "sine", "round_to_power_of_two": False, "low_freq": 60.0,
     "high_freq": -400.0},
    {"use_log_fbank": False},
]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("audio", ["noise", "speech"])
@pytest.mark.parametrize("params", KALDI_CONFIGS, ids=lambda p: ",".join(p) or "default")
@pytest.mark.parametrize(("sr", "n_mels"), [(16000, 80), (16000, 128), (8000, 23)])
def test_fbank_matches_cpu(poisoned, audio, params, sr, n_mels) -> None:
    lengths = [max(n * sr // 16000, 1) for n in KALDI_LENGTHS]
    x, lens = _batch(_audio(audio, lengths, sr, seed=sr + n_mels))
    config = FeatureConfig("fbank", sample_rate=sr, num_mel_bins=n_mels, params=params)
    ref, ref_lens = fbank_native(x, lens, config)  # the CPU oracle, not routed
    feats, feat_lens = fbank(x.cuda(), lens.cuda(), config)
    assert ops.gap_counts() == {("kernel", "fbank"): 1}
    assert feat_lens.device.type == "cuda" and feat_lens.cpu().tolist() == ref_lens.tolist()
    if params.get("use_log_fbank", True):
        assert _max_diff(feats, ref) <= 2e-3
    else:  # linear mel energies: compare their logs, as the log-mel above
        assert _max_diff(feats, ref) <= 2e-3 * float(ref.abs().max())
        valid = ref > 1.0
        assert _max_diff(feats.cpu()[valid].log(), ref[valid].log()) <= 2e-3
    assert (feats.cpu()[torch.arange(feats.shape[1]) >= ref_lens[:, None]] == 0).all()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("params", [{}, {"num_ceps": 20, "cepstral_lifter": 0.0,
                                         "use_energy": False, "window_type": "hanning"}])
def test_mfcc_matches_cpu(poisoned, params) -> None:
    x, lens = _batch(_audio("speech", KALDI_LENGTHS, seed=5))
    config = FeatureConfig("mfcc", num_mel_bins=40, params={"audio_scale": 32768.0, **params})
    ref, ref_lens = mfcc_native(x, lens, config)
    feats, feat_lens = mfcc(x.cuda(), lens, config)  # lengths on the CPU: moved, as torch does
    assert ops.gap_counts() == {("kernel", "mfcc"): 1}
    assert feat_lens.cpu().tolist() == ref_lens.tolist()
    assert _max_diff(feats, ref) <= 5e-3


@pytest.mark.gpu
@needs_cuda
def test_dither_matches_the_torch_path_on_the_device(poisoned) -> None:
    """The noise is the torch path's own draw: compared on the same device, not with the CPU
    generator's."""
    rows = [*_audio("speech", KALDI_LENGTHS, seed=9), np.zeros(8_000, np.float32)]
    x, lens = _batch(rows)  # the silent row is where dither shows: log(eps) without it
    x, lens = x.cuda(), lens.cuda()
    config = FeatureConfig("fbank", params={"dither": 1.0, "dither_seed": 3,
                                            "audio_scale": 32768.0, "use_energy": True})
    feats, _ = fbank(x, lens, config)
    assert ops.gap_counts() == {("kernel", "fbank"): 1}
    ref, _ = fbank_native(x, lens, config)
    assert _max_diff(feats, ref.cpu()) <= 2e-3
    plain, _ = fbank_native(x, lens, FeatureConfig("fbank", params={
        "audio_scale": 32768.0, "use_energy": True}))
    assert _max_diff(feats, plain.cpu()) > 1e-3  # the dither did land


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("n_mels", "chunk", "extra"), [(80, 30.0, 1_234), (128, 5.0, 16_000)])
@pytest.mark.parametrize("audio", ["noise", "speech"])
def test_whisper_logmel_matches_cpu(poisoned, n_mels, chunk, extra, audio) -> None:
    window = int(chunk * 16000)
    lengths = [1, 159, 160, 161, 16_007, 48_001, window, window + extra]  # last: trimmed
    x, lens = _batch(_audio(audio, lengths, seed=n_mels))
    config = FeatureConfig("whisper_logmel", num_mel_bins=n_mels, params={"chunk_seconds": chunk})
    ref, ref_lens = whisper_logmel_native(x, lens, config)
    feats, feat_lens = whisper_logmel(x.cuda(), lens.cuda(), config)
    assert ops.gap_counts() == {("kernel", "whisper_logmel"): 1}
    assert feat_lens.cpu().tolist() == ref_lens.tolist()
    assert _max_diff(feats, ref) <= 1e-3
    # A batch narrower than the window: zeros past each row, as the padded window has.
    narrow, narrow_lens = _batch(_audio(audio, [3_000, 20_000], seed=1))
    ref, _ = whisper_logmel_native(narrow, narrow_lens, config)
    feats, _ = whisper_logmel(narrow.double().cuda(), narrow_lens.cuda(), config)
    assert _max_diff(feats, ref) <= 1e-3


@pytest.mark.gpu
@needs_cuda
def test_degenerate_shapes(poisoned) -> None:
    for name, fn in (("fbank", fbank), ("mfcc", mfcc), ("whisper_logmel", whisper_logmel)):
        config = FeatureConfig(name, params={"chunk_seconds": 1.0} if "whisper" in name else {})
        for x, lens in ((torch.zeros(0, 5000), torch.zeros(0, dtype=torch.int64)),
                        (torch.ones(3, 300), torch.tensor([300, 10, 0]))):  # no full frame
            ref, ref_lens = fn(x, lens, config)
            feats, feat_lens = fn(x.cuda(), lens.cuda(), config)
            assert feats.shape == ref.shape and feats.device.type == "cuda"
            assert feat_lens.cpu().tolist() == ref_lens.tolist()
            assert _max_diff(feats, ref) <= 1e-3


@pytest.mark.gpu
@needs_cuda
def test_cuda_dispatch_counts_kernel_gap_and_torch_backend() -> None:
    x, lens = _batch(_audio("speech", [20_000, 30_000], seed=2))
    x, lens = x.cuda(), lens.cuda()
    whisper = FeatureConfig("whisper_logmel", params={"chunk_seconds": 2.0})
    fast, _ = whisper_logmel(x, lens, whisper)
    wide = FeatureConfig("fbank", frame_length_ms=600.0, frame_shift_ms=100.0)
    served, _ = fbank(x, lens, wide)  # the gap: the torch path on the device, counted
    assert ops.gap_counts() == {("kernel", "whisper_logmel"): 1,
                                     ("gap", "features-large-fft"): 1}
    assert torch.equal(served, fbank_native(x, lens, wide)[0])
    assert "features-large-fft" in ops.format_gap_report()
    ops.set_backend("torch")
    slow, _ = whisper_logmel(x, lens, whisper)
    # Every call is accounted for: the torch backend's is counted apart, no kernel call added.
    assert ops.gap_counts() == {("kernel", "whisper_logmel"): 1,
                                ("gap", "features-large-fft"): 1,
                                ("torch_backend", "whisper_logmel"): 1}
    assert torch.equal(slow, whisper_logmel_native(x, lens, whisper)[0])
    assert _max_diff(fast, slow.cpu()) <= 1e-3
