"""Kaldi fbank / mfcc frontends against kaldi-native-fbank (the oracle), row by row."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oasr.features import FeatureConfig, build_extractor
from oasr.features.kaldi import (
    FBANK_DEFAULTS,
    MFCC_DEFAULTS,
    fbank,
    kaldi_framing,
    mfcc,
    num_frames,
)
from oasr.features.kaldi_specs import FBANK, MFCC
from tests.helpers.data import SHARED_DATA

knf = pytest.importorskip("kaldi_native_fbank")

SPEECH_DIR = SHARED_DATA / "librispeech-test-other-70/audio"
# Three utterances, cut to a few seconds each at different lengths.
SPEECH = [("1688-142285-0002", 45_000), ("1998-15444-0000", 64_001), ("1688-142285-0000", 38_123)]
# Around the frame grid: no frame, exactly one, one plus a hop minus one, two, longer.
ODD_LENGTHS = [1, 399, 400, 401, 559, 560, 561, 4_321, 16_007]


def _speech() -> list[np.ndarray]:
    import soundfile as sf

    waves = []
    for utt, n in SPEECH:
        path = SPEECH_DIR / f"{utt}.flac"
        if not path.exists():
            pytest.skip(f"{path} is not present")
        x, sr = sf.read(path, dtype="float32", frames=n)
        assert sr == 16000 and len(x) == n
        waves.append(x)
    return waves


def _noise() -> list[np.ndarray]:
    rng = np.random.default_rng(2024)
    return [(rng.standard_normal(n) * 0.1).astype(np.float32) for n in ODD_LENGTHS]


def _batch(waves: list[np.ndarray], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad into (B, T); ``fill`` in the padding checks that samples past ``lengths`` are unused."""
    longest = max(len(w) for w in waves)
    x = torch.full((len(waves), longest), fill, dtype=torch.float32)
    for i, w in enumerate(waves):
        x[i, : len(w)] = torch.from_numpy(w)
    return x, torch.tensor([len(w) for w in waves])


def _knf(wave: np.ndarray, kind: str, num_bins: int, sample_rate: int = 16000,
         frame_opts: dict | None = None, mel_opts: dict | None = None, **opts) -> np.ndarray:
    """kaldi-native-fbank on one row -> (frames, dim) float32; dither off as at inference."""
    o = knf.FbankOptions() if kind == "fbank" else knf.MfccOptions()
    o.frame_opts.dither = 0.0
    o.frame_opts.samp_freq = float(sample_rate)
    o.mel_opts.num_bins = num_bins
    for k, v in (frame_opts or {}).items():
        setattr(o.frame_opts, k, v)
    for k, v in (mel_opts or {}).items():
        setattr(o.mel_opts, k, v)
    for k, v in opts.items():
        setattr(o, k, v)
    ext = knf.OnlineFbank(o) if kind == "fbank" else knf.OnlineMfcc(o)
    ext.accept_waveform(float(sample_rate), wave)
    ext.input_finished()
    frames = [np.array(ext.get_frame(i)) for i in range(ext.num_frames_ready)]
    return np.stack(frames) if frames else np.zeros((0, ext.dim), np.float32)


@pytest.fixture(scope="module")
def speech() -> list[np.ndarray]:
    return _speech()


def _check_rows(feats, lens, waves, expected_rows, dim) -> list[float]:
    """Frame counts, padding and per-row diffs (returned) against the oracle's rows."""
    assert feats.dtype == torch.float32 and lens.dtype == torch.int64
    assert feats.shape == (len(waves), max(r.shape[0] for r in expected_rows), dim)
    diffs = []
    for i, ref in enumerate(expected_rows):
        n = ref.shape[0]
        assert int(lens[i]) == n
        assert torch.all(feats[i, n:] == 0)
        if n:
            diffs.append(np.abs(feats[i, :n].numpy() - ref))
    return diffs


@pytest.mark.parametrize("scale", [1.0, 32768.0])
def test_fbank_matches_knf_on_speech(speech, scale: float) -> None:
    x, lengths = _batch(speech, fill=0.7)
    config = FeatureConfig("fbank", num_mel_bins=80, params={"audio_scale": scale})
    feats, lens = fbank(x, lengths, config)
    refs = [_knf(w * scale, "fbank", 80) for w in speech]
    diffs = np.concatenate([d.ravel() for d in _check_rows(feats, lens, speech, refs, 80)])
    print(f"\nfbank speech scale={scale:g}: max |ours - knf| = {diffs.max():.3g}, "
          f"mean = {diffs.mean():.3g}, 99.9% = {np.quantile(diffs, 0.999):.3g}")
    # float32 FFT rounding, both sides: it shows in the quietest bins of the quietest frames
    # (a float64 reference sits about as far from each).
    assert diffs.max() < 1e-2
    assert np.quantile(diffs, 0.999) < 1e-3
    assert diffs.mean() < 5e-5


@pytest.mark.parametrize("scale", [1.0, 32768.0])
@pytest.mark.parametrize(("num_bins", "use_energy"), [(23, True), (80, False)])
def test_mfcc_matches_knf_on_speech(speech, scale: float, num_bins: int, use_energy: bool) -> None:
    x, lengths = _batch(speech, fill=-0.3)
    params = {"audio_scale": scale, "use_energy": use_energy}
    feats, lens = mfcc(x, lengths, FeatureConfig("mfcc", num_mel_bins=num_bins, params=params))
    refs = [_knf(w * scale, "mfcc", num_bins, use_energy=use_energy) for w in speech]
    diffs = np.concatenate([d.ravel() for d in _check_rows(feats, lens, speech, refs, 13)])
    print(f"\nmfcc speech scale={scale:g} bins={num_bins} energy={use_energy}: "
          f"max |ours - knf| = {diffs.max():.3g}, mean = {diffs.mean():.3g}, "
          f"99.9% = {np.quantile(diffs, 0.999):.3g} (max |knf| = {np.abs(refs[0]).max():.3g})")
    # The DCT sums the log-mel differences above over all bins and the lifter scales cepstrum
    # k by up to 1 + 22 / 2 = 12.
    assert diffs.max() < 3e-2
    assert diffs.mean() < 2e-4


@pytest.mark.parametrize("scale", [1.0, 32768.0])
def test_random_audio_odd_lengths(scale: float) -> None:
    waves = _noise()
    x, lengths = _batch(waves, fill=5.0)
    config = FeatureConfig("fbank", params={"audio_scale": scale})
    feats, lens = fbank(x, lengths, config)
    refs = [_knf(w * scale, "fbank", 80) for w in waves]
    assert [r.shape[0] for r in refs] == [0, 0, 1, 1, 1, 2, 2, 25, 98]
    worst = max(float(d.max()) for d in _check_rows(feats, lens, waves, refs, 80))
    print(f"\nfbank noise scale={scale:g}: max |ours - knf| = {worst:.3g}")
    assert worst < 2e-4  # a flat spectrum has no near-floor bins

    mfccs, mlens = mfcc(x, lengths, FeatureConfig("mfcc", params={"audio_scale": scale}))
    mrefs = [_knf(w * scale, "mfcc", 80) for w in waves]
    worst = max(float(d.max()) for d in _check_rows(mfccs, mlens, waves, mrefs, 13))
    print(f"mfcc noise scale={scale:g}: max |ours - knf| = {worst:.3g}")
    assert worst < 1e-3


@pytest.mark.parametrize("kind", ["fbank", "mfcc"])
def test_without_snip_edges_matches_knf(speech, kind: str) -> None:
    """lhotse / kaldifeat / icefall framing: frames centred on k * hop + hop / 2, each row
    reflected at its own ends (twice over for rows shorter than the reflected span)."""
    waves = [speech[2][:9_001], *[w for w in _noise() if len(w) > 0],
             *_noise_lengths([80, 119, 120, 199, 279, 280])]
    x, lengths = _batch(waves, fill=3.0)
    params = {"snip_edges": False, "high_freq": -400.0}
    fn = fbank if kind == "fbank" else mfcc
    feats, lens = fn(x, lengths, FeatureConfig(kind, num_mel_bins=40, params=params))
    refs = [_knf(w, kind, 40, frame_opts={"snip_edges": False}, mel_opts={"high_freq": -400.0})
            for w in waves]
    assert [r.shape[0] for r in refs] == [(len(w) + 80) // 160 for w in waves]
    dim = 40 if kind == "fbank" else 13
    worst = max(float(d.max()) for d in _check_rows(feats, lens, waves, refs, dim))
    print(f"\n{kind} snip_edges=False: max |ours - knf| = {worst:.3g}")
    assert worst < (2e-3 if kind == "fbank" else 2e-2)  # as on speech with snip_edges


def _noise_lengths(lengths: list[int]) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [(rng.standard_normal(n) * 0.1).astype(np.float32) for n in lengths]


def test_frame_counts_without_snip_edges() -> None:
    lengths = torch.tensor([0, 1, 79, 80, 239, 240, 16000, 16079, 16080])
    config = FeatureConfig("fbank", params={"snip_edges": False})
    _, lens = fbank(torch.randn(len(lengths), 16080) * 0.1, lengths, config)
    assert lens.tolist() == [(n + 80) // 160 for n in lengths.tolist()]
    assert kaldi_framing(config).prefill == 120  # frame 0 starts 120 samples before sample 0


@pytest.mark.parametrize(
    ("params", "knf_frame", "knf_mel", "knf_opts"),
    [
        ({"window_type": "hamming", "preemph_coeff": 0.0, "remove_dc_offset": False},
         {"window_type": "hamming", "preemph_coeff": 0.0, "remove_dc_offset": False}, {}, {}),
        ({"window_type": "hanning", "low_freq": 64.0, "high_freq": -400.0},
         {"window_type": "hanning"}, {"low_freq": 64.0, "high_freq": -400.0}, {}),
        ({"window_type": "rectangular", "high_freq": 7000.0, "round_to_power_of_two": False},
         {"window_type": "rectangular", "round_to_power_of_two": False},
         {"high_freq": 7000.0}, {}),
        ({"window_type": "blackman", "use_energy": True, "raw_energy": False,
          "energy_floor": 5.0},
         {"window_type": "blackman"}, {}, {"use_energy": True, "raw_energy": False,
                                           "energy_floor": 5.0}),
        ({"window_type": "sine", "use_power": False}, {"window_type": "sine"}, {},
         {"use_power": False}),
        ({"use_log_fbank": False, "preemph_coeff": 0.5}, {"preemph_coeff": 0.5}, {},
         {"use_log_fbank": False}),
    ],
)
def test_fbank_options_match_knf(params, knf_frame, knf_mel, knf_opts) -> None:
    rng = np.random.default_rng(5)
    # Coloured noise (a random walk, mean-removed) with a DC offset and near-silent stretches.
    w = np.cumsum(rng.standard_normal(9_999)).astype(np.float32) * 0.01
    w = (w - w.mean() + 0.05) * np.repeat(rng.uniform(0.001, 1.0, 10), 1000)[:9_999]
    w = w.astype(np.float32)
    config = FeatureConfig("fbank", num_mel_bins=40, params=params)
    feats, lens = fbank(torch.from_numpy(w)[None], torch.tensor([len(w)]), config)
    ref = _knf(w, "fbank", 40, frame_opts=knf_frame, mel_opts=knf_mel, **knf_opts)
    assert feats.shape[1:] == ref.shape and int(lens[0]) == ref.shape[0]
    ours = feats[0].numpy()
    if params.get("use_log_fbank") is False:  # linear energies: compare their logs
        assert ours.min() >= 0 and ours.max() > 1.0
        ours, ref = np.log(np.maximum(ours, 1e-30)), np.log(np.maximum(ref, 1e-30))
    # Measured: <= 1.2e-5 (no near-floor bins in this signal).
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


def test_energy_floor_applies_to_silence() -> None:
    params = {"use_energy": True, "energy_floor": 2.0}
    feats, _ = fbank(torch.zeros(1, 1000), torch.tensor([1000]), FeatureConfig("fbank",
                                                                               params=params))
    ref = _knf(np.zeros(1000, np.float32), "fbank", 80, use_energy=True, energy_floor=2.0)
    assert np.allclose(feats[0, :, 0].numpy(), math.log(2.0)) and np.allclose(ref[:, 0],
                                                                              math.log(2.0))
    # Mel energies of digital silence sit at the float epsilon floor, as Kaldi's do.
    assert torch.all(feats[0, :, 1:] == math.log(np.finfo(np.float32).eps))
    np.testing.assert_array_equal(feats[0].numpy(), ref)


@pytest.mark.parametrize("sample_rate", [8000, 22050])
def test_other_rates_and_frame_sizes(sample_rate: int) -> None:
    rng = np.random.default_rng(sample_rate)
    w = (rng.standard_normal(7_777) * 0.2).astype(np.float32)
    config = FeatureConfig("mfcc", sample_rate=sample_rate, num_mel_bins=23,
                           frame_length_ms=32.0, frame_shift_ms=12.5)
    feats, lens = mfcc(torch.from_numpy(w)[None], torch.tensor([len(w)]), config)
    ref = _knf(w, "mfcc", 23, sample_rate=sample_rate,
               frame_opts={"frame_length_ms": 32.0, "frame_shift_ms": 12.5})
    assert feats.shape[1:] == ref.shape and int(lens[0]) == ref.shape[0]
    np.testing.assert_allclose(feats[0].numpy(), ref, atol=5e-4, rtol=0)  # measured <= 4.3e-5


@pytest.mark.parametrize("fn", [fbank, mfcc])
def test_batched_rows_equal_rows_alone(speech, fn) -> None:
    waves = [speech[0], *_noise()[2:6], speech[1]]
    x, lengths = _batch(waves, fill=0.9)
    config = FeatureConfig(fn.__name__, params={"audio_scale": 32768.0})
    feats, lens = fn(x, lengths, config)
    for i, w in enumerate(waves):
        alone, alone_len = fn(torch.from_numpy(w)[None], torch.tensor([len(w)]), config)
        n = int(alone_len[0])
        assert int(lens[i]) == n == alone.shape[1]
        torch.testing.assert_close(feats[i, :n], alone[0], atol=1e-4, rtol=1e-6)


def test_frame_counts_follow_snip_edges() -> None:
    lengths = torch.tensor([0, 1, 399, 400, 401, 559, 560, 16000, 16159, 16160])
    expected = [0 if n < 400 else (n - 400) // 160 + 1 for n in lengths.tolist()]
    assert num_frames(lengths, 400, 160).tolist() == expected
    x = torch.randn(len(lengths), 16160) * 0.1
    _, lens = fbank(x, lengths, FeatureConfig("fbank"))
    assert lens.tolist() == expected
    # Lengths past the batch width count the samples that are there.
    _, lens = fbank(torch.zeros(1, 1000), torch.tensor([5000]), FeatureConfig("fbank"))
    assert lens.tolist() == [(1000 - 400) // 160 + 1]


def test_streaming_chunks_reproduce_offline_features(speech) -> None:
    config = FeatureConfig("fbank", params={"audio_scale": 32768.0})
    framing = kaldi_framing(config)
    assert (framing.span, framing.hop, framing.history) == (400, 160, 240)
    assert FBANK.framing == framing == MFCC.framing and FBANK.supports_streaming
    w = torch.from_numpy(speech[1])
    whole, _ = fbank(w[None], torch.tensor([len(w)]), config)
    pieces, buffer = [], w[:0]
    for chunk in torch.split(w, 1_234):  # chunks that do not align with the hop
        buffer = torch.cat([buffer, chunk])
        feats, lens = fbank(buffer[None], torch.tensor([len(buffer)]), config)
        n = int(lens[0])
        pieces.append(feats[0, :n])
        buffer = buffer[n * framing.hop :]  # keep from the next unconsumed frame on
        assert len(buffer) < framing.span or n == 0
    streamed = torch.cat(pieces)
    assert streamed.shape == whole[0].shape
    torch.testing.assert_close(streamed, whole[0], atol=1e-4, rtol=1e-6)


def test_dither_is_seeded_and_off_by_default() -> None:
    x = torch.zeros(2, 4000)
    lengths = torch.tensor([4000, 4000])
    base, _ = fbank(x, lengths, FeatureConfig("fbank"))
    assert torch.all(base == math.log(np.finfo(np.float32).eps))  # no dither: at the floor
    params = {"dither": 1.0, "dither_seed": 7, "use_energy": True}
    a, _ = fbank(x, lengths, FeatureConfig("fbank", params=params))
    b, _ = fbank(x, lengths, FeatureConfig("fbank", params=params))
    c, _ = fbank(x, lengths, FeatureConfig("fbank", params={**params, "dither_seed": 8}))
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert not torch.equal(a, c) and not torch.equal(a[0], a[1])
    # Unit Gaussian dither, mean removed: frame energy ~ chi-square with 399 degrees of freedom.
    energy = a[..., 0].exp()
    assert abs(float(energy.mean()) - 399.0) < 10.0


def test_registered_specs_and_defaults() -> None:
    assert build_extractor(FeatureConfig("fbank")) is FBANK and FBANK.fn is fbank
    assert build_extractor(FeatureConfig("mfcc")) is MFCC and MFCC.fn is mfcc
    assert FBANK.defaults == FBANK_DEFAULTS and MFCC.defaults == MFCC_DEFAULTS
    assert FBANK.supports_streaming and MFCC.supports_streaming
    assert FBANK.window_seconds_attr is None and FeatureConfig("fbank").fixed_window_frames is None
    # Kaldi's own option defaults, as the oracle reports them (dither aside: off at inference).
    fo, mo = knf.FbankOptions(), knf.MfccOptions()
    for spec_defaults, opts in ((FBANK_DEFAULTS, fo), (MFCC_DEFAULTS, mo)):
        assert spec_defaults["preemph_coeff"] == pytest.approx(opts.frame_opts.preemph_coeff)
        assert spec_defaults["remove_dc_offset"] == opts.frame_opts.remove_dc_offset
        assert spec_defaults["window_type"] == opts.frame_opts.window_type
        assert spec_defaults["round_to_power_of_two"] == opts.frame_opts.round_to_power_of_two
        assert spec_defaults["low_freq"] == opts.mel_opts.low_freq
        assert spec_defaults["high_freq"] == opts.mel_opts.high_freq
        assert spec_defaults["use_energy"] == opts.use_energy
        assert spec_defaults["energy_floor"] == opts.energy_floor
        assert spec_defaults["raw_energy"] == opts.raw_energy
        assert spec_defaults["dither"] == 0.0
        assert spec_defaults["snip_edges"] == opts.frame_opts.snip_edges
    assert MFCC_DEFAULTS["num_ceps"] == mo.num_ceps
    assert MFCC_DEFAULTS["cepstral_lifter"] == mo.cepstral_lifter


def test_dtype_and_empty_batch() -> None:
    config = FeatureConfig("fbank")
    w = torch.randn(1, 8000, dtype=torch.float64) * 0.1
    f64, _ = fbank(w, torch.tensor([8000]), config)
    f32, _ = fbank(w.float(), torch.tensor([8000]), config)
    assert f64.dtype == torch.float32
    torch.testing.assert_close(f64, f32, atol=0, rtol=0)
    empty, empty_len = mfcc(torch.zeros(0, 1000), torch.zeros(0, dtype=torch.int64),
                            FeatureConfig("mfcc"))
    assert empty.shape == (0, 4, 13) and empty_len.shape == (0,)
    short, short_len = fbank(torch.zeros(3, 100), torch.tensor([100, 50, 0]), config)
    assert short.shape == (3, 0, 80) and short_len.tolist() == [0, 0, 0]


def test_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        fbank(torch.zeros(1000), torch.tensor([1000]), FeatureConfig("fbank"))
    with pytest.raises(ValueError, match="lengths"):
        fbank(torch.zeros(2, 1000), torch.tensor([1000]), FeatureConfig("fbank"))
    with pytest.raises(ValueError, match="audio_scal.*valid:.*audio_scale"):
        fbank(torch.zeros(1, 1000), torch.tensor([1000]),
              FeatureConfig("fbank", params={"audio_scal": 2.0}))
    with pytest.raises(ValueError, match="num_ceps"):
        fbank(torch.zeros(1, 1000), torch.tensor([1000]),
              FeatureConfig("fbank", params={"num_ceps": 13}))  # an mfcc-only key
    with pytest.raises(ValueError, match="window_type"):
        fbank(torch.zeros(1, 1000), torch.tensor([1000]),
              FeatureConfig("fbank", params={"window_type": "kaiser"}))
    with pytest.raises(ValueError, match="num_ceps"):
        mfcc(torch.zeros(1, 1000), torch.tensor([1000]),
             FeatureConfig("mfcc", num_mel_bins=10, params={"num_ceps": 13}))
    with pytest.raises(ValueError, match="f_max"):
        fbank(torch.zeros(1, 1000), torch.tensor([1000]),
              FeatureConfig("fbank", params={"high_freq": 9000.0}))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("snip_edges", [True, False])
@pytest.mark.parametrize("fn", [fbank, mfcc])
def test_cuda_matches_cpu(fn, snip_edges: bool) -> None:
    waves = _noise()
    x, lengths = _batch(waves, fill=0.5)
    config = FeatureConfig(fn.__name__, params={"audio_scale": 32768.0,
                                                "snip_edges": snip_edges})
    cpu, cpu_len = fn(x, lengths, config)
    gpu, gpu_len = fn(x.cuda(), lengths.cuda(), config)
    assert gpu.device.type == "cuda" and gpu_len.device.type == "cuda"
    # cuFFT vs pocketfft, both float64: measured <= 3.3e-5 (fbank), 8.4e-5 (mfcc).
    torch.testing.assert_close(gpu.cpu(), cpu, atol=5e-4, rtol=0)
    assert gpu_len.cpu().tolist() == cpu_len.tolist()
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fast, _ = fn(x.cuda(), lengths.cuda(), config)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, gpu, atol=1e-6, rtol=0)  # measured: identical
