"""Upstream front ends (``oasr.features.recipes``) against each project's own feature code on real
speech: icefall (lhotse's ``Fbank``, and kaldi-native-fbank configured as icefall's
pretrained.py configures kaldifeat), WeNet (``torchaudio.compliance.kaldi.fbank`` with the
arguments WeNet's ``compute_fbank`` passes, through kaldi-native-fbank set to the same options:
torchaudio is not usable here), FunASR (its ``WavFrontend``: fbank, LFR and ``am.mvn`` CMVN).
Whisper and NeMo / Parakeet are checked against transformers in ``test_whisper_logmel.py`` and
``test_parakeet_logmel.py``.

Tolerances: every oracle computes its FFT in float32 and ours in float64, so the quietest mel
bins of the quietest frames differ by up to ~1e-3 in log (lhotse and kaldi-native-fbank differ
from each other by 1.7e-3 on the same audio); the means stay near 5e-6. Frame counts are exact.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from oasr.features import build_extractor
from oasr.features.lfr import apply_lfr_batch
from oasr.features.recipes import funasr_wav_frontend, lhotse_fbank, torchaudio_fbank
from tests.helpers.data import SHARED_DATA

knf = pytest.importorskip("kaldi_native_fbank")

SPEECH = SHARED_DATA / "librispeech-test-other-70" / "audio"
UTTS = ["1688-142285-0002", "3331-159605-0005", "1998-15444-0001", "367-130732-0006"]
MAX_DIFF, MEAN_DIFF = 3e-3, 2e-5


@pytest.fixture(scope="module")
def waves() -> list[np.ndarray]:
    import soundfile as sf

    out = []
    for utt in UTTS:
        path = SPEECH / f"{utt}.flac"
        if not path.is_file():
            pytest.skip(f"{path} is not on this machine (shared data)")
        out.append(sf.read(path, dtype="float32")[0])
    out.append(out[0][:12_345])  # a cut that ends mid-frame
    return out


def ours(config, waves: list[np.ndarray]) -> list[np.ndarray]:
    """The configured frontend over the waves as one padded batch: each row's valid frames."""
    x = torch.zeros(len(waves), max(len(w) for w in waves))
    for i, w in enumerate(waves):
        x[i, :len(w)] = torch.from_numpy(w)
    feats, lens = build_extractor(config).fn(x, torch.tensor([len(w) for w in waves]), config)
    if config.lfr:
        feats, lens = apply_lfr_batch(feats, lens, config.lfr_m, config.lfr_n)
    return [feats[i, :int(n)].numpy() for i, n in enumerate(lens)]


def check(got: list[np.ndarray], want: list[np.ndarray], max_diff: float = MAX_DIFF,
          mean_diff: float = MEAN_DIFF) -> None:
    assert [g.shape for g in got] == [w.shape for w in want]
    diffs = np.concatenate([np.abs(g - w).ravel() for g, w in zip(got, want)])
    print(f"max |ours - upstream| = {diffs.max():.3g}, mean = {diffs.mean():.3g}")
    assert diffs.max() < max_diff and diffs.mean() < mean_diff


def knf_fbank(wave: np.ndarray, **opts) -> np.ndarray:
    """kaldi-native-fbank with Kaldi's option names: frame_opts / mel_opts / top level."""
    o = knf.FbankOptions()
    frame = ("dither", "snip_edges", "samp_freq", "window_type", "frame_length_ms",
             "frame_shift_ms", "preemph_coeff", "remove_dc_offset", "round_to_power_of_two")
    for key, value in opts.items():
        if key in frame:
            setattr(o.frame_opts, key, value)
        elif key in ("num_bins", "low_freq", "high_freq"):
            setattr(o.mel_opts, key, value)
        else:
            setattr(o, key, value)
    f = knf.OnlineFbank(o)
    f.accept_waveform(o.frame_opts.samp_freq, wave)
    f.input_finished()
    return np.stack([f.get_frame(i) for i in range(f.num_frames_ready)])


def _lhotse_fbank():
    """lhotse's Fbank class. The zipformer oracle stands in a module for torchaudio, which
    lhotse probes at import; it is set aside while lhotse imports."""
    stub = sys.modules.get("torchaudio")
    if stub is not None and getattr(stub, "__file__", None) is None:
        del sys.modules["torchaudio"]
    try:
        pytest.importorskip("lhotse", reason="pip install --no-deps lhotse==1.33.0 intervaltree "
                                             "cytoolz toolz")
        from lhotse.features.kaldi.extractors import Fbank, FbankConfig
    finally:
        if stub is not None:
            sys.modules.setdefault("torchaudio", stub)
    return Fbank, FbankConfig


@pytest.mark.parametrize("bins", [80, 64])
def test_icefall_equals_lhotse_fbank(waves, bins: int) -> None:
    fbank_cls, config_cls = _lhotse_fbank()
    extractor = fbank_cls(config_cls(num_filters=bins))
    check(ours(lhotse_fbank(bins), waves), [extractor.extract(w, 16000) for w in waves])


def test_icefall_equals_kaldifeat_as_pretrained_py(waves) -> None:
    # icefall's zipformer/pretrained.py: dither 0, snip_edges False, high_freq -400
    want = [knf_fbank(w, dither=0.0, snip_edges=False, samp_freq=16000, num_bins=80,
                      high_freq=-400.0) for w in waves]
    check(ours(lhotse_fbank(80), waves), want)


def test_lhotse_config_is_fully_recorded() -> None:
    """Every FbankConfig value that changes features, as lhotse 1.33 defines it."""
    _, config_cls = _lhotse_fbank()
    c, p = config_cls(), lhotse_fbank(80).params
    assert (c.frame_length, c.frame_shift, c.sampling_rate) == (0.025, 0.01, 16000)
    assert (c.snip_edges, c.high_freq, c.low_freq, c.dither) == (
        p["snip_edges"], p["high_freq"], p["low_freq"], p["dither"])
    assert (c.window_type, c.preemph_coeff, c.remove_dc_offset, c.raw_energy) == (
        p["window_type"], p["preemph_coeff"], p["remove_dc_offset"], p["raw_energy"])
    assert (c.use_energy, c.round_to_power_of_two, c.energy_floor) == (
        p["use_energy"], p["round_to_power_of_two"], p["energy_floor"])
    assert not c.use_fft_mag and p["use_power"] and p["use_log_fbank"]
    assert lhotse_fbank(80).params == build_extractor(lhotse_fbank(80)).defaults | p


# WeNet's compute_fbank: kaldi.fbank(waveform * (1 << 15), num_mel_bins, frame_length,
# frame_shift, dither, energy_floor=0.0, sample_frequency) (train.yaml's fbank_conf).
WENET_CALL = dict(num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
                  energy_floor=0.0, sample_frequency=16000)


def test_wenet_equals_torchaudio_call(waves) -> None:
    # torchaudio.compliance.kaldi.fbank's defaults are Kaldi's but energy_floor (1.0)
    want = [knf_fbank(w * 32768.0, dither=0.0, snip_edges=True, samp_freq=16000, num_bins=80,
                      energy_floor=0.0, window_type="povey") for w in waves]
    # 16-bit scale lifts the quiet bins off the FLT_EPSILON floor, where float32 FFT rounding
    # shows (test_kaldi.py measures the same 5e-3 against kaldi-native-fbank)
    check(ours(torchaudio_fbank(**WENET_CALL), waves), want, max_diff=1e-2, mean_diff=5e-5)


def test_wenet_converter_frontend_is_the_recipe() -> None:
    from pathlib import Path

    from oasr.models.conformer.converters import WenetConformerConverter

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "wenet_tiny" / "u2pp_conv2d4"
    conv = WenetConformerConverter()
    got = conv.build_feature_config(conv.build_config(folder)).complete()
    assert got == torchaudio_fbank(**WENET_CALL)


def test_torchaudio_options_it_cannot_compute_are_refused() -> None:
    with pytest.raises(ValueError, match="subtract_mean"):
        torchaudio_fbank(subtract_mean=True)


FUNASR_CONF = {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25,
               "frame_shift": 10, "lfr_m": 7, "lfr_n": 6}


def test_funasr_equals_wav_frontend_with_cmvn(waves, tmp_path) -> None:
    pytest.importorskip("funasr", reason="pip install --no-deps funasr==1.4.16")
    from oasr.vad.fsmn import load_am_mvn
    from tests.models.paraformer.funasr_folder import WavFrontend, write_am_mvn

    dim = 80 * 7
    g = torch.Generator().manual_seed(0)
    write_am_mvn(tmp_path / "am.mvn", 10.0 + torch.randn(dim, generator=g),
                 0.3 + 0.05 * torch.rand(dim, generator=g))
    frontend = WavFrontend(cmvn_file=str(tmp_path / "am.mvn"), **FUNASR_CONF, dither=0.0)
    want = []
    for w in waves:
        feats, lens = frontend(torch.from_numpy(w)[None], torch.tensor([len(w)]))
        want.append(feats[0, :int(lens[0])].numpy())
    # Paraformer applies am.mvn in the model (cmvn_shift / cmvn_scale), after the frontend.
    shift, scale = load_am_mvn(tmp_path / "am.mvn")
    got = [(f + shift.numpy()) * scale.numpy()
           for f in ours(funasr_wav_frontend(FUNASR_CONF), waves)]
    # The CMVN scales by ~0.3 and LFR copies frames: the fbank bounds, scaled.
    check(got, want, mean_diff=5e-5)


def test_paraformer_converter_frontend_is_the_recipe() -> None:
    from oasr.models.paraformer.config import ParaformerConfig
    from oasr.models.paraformer.converters import FunasrParaformerConverter

    cfg = ParaformerConfig(num_mel_bins=80, lfr_m=7, lfr_n=6)
    got = FunasrParaformerConverter().build_feature_config(cfg).complete()
    assert got == funasr_wav_frontend(FUNASR_CONF)
