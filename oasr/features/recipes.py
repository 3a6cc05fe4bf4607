"""Upstream front ends as ``FeatureConfig``s, built from the options each project stores.

Converters call these with what the checkpoint records, so a bundle's frontend is the one its
recipe computed, every option that changes a value written out (``FeatureConfig.complete``):

- ``lhotse_fbank``: icefall (k2) recipes: lhotse's ``Fbank(FbankConfig())`` at training, and
  kaldifeat as icefall's ``pretrained.py`` configures it at decode (dither 0,
  ``snip_edges=False``, ``high_freq=-400``): the same values.
- ``torchaudio_fbank``: ``torchaudio.compliance.kaldi.fbank`` with the keyword arguments a
  recipe passes (WeNet's ``compute_fbank``: ``num_mel_bins``, ``frame_length``,
  ``frame_shift``, ``dither``, ``energy_floor=0.0``, ``window_type``), on 16-bit-scaled samples.
- ``funasr_wav_frontend``: FunASR's ``WavFrontend`` from its ``frontend_conf`` (Kaldi fbank on
  16-bit-scaled samples, hamming window, LFR). Its ``am.mvn`` CMVN is the model's
  (Paraformer's ``cmvn_shift`` / ``cmvn_scale``), not the frontend's.

Dither is 0 in all of them: decoding is deterministic (icefall and WeNet decode without it;
FunASR's ``WavFrontend`` defaults to 1.0, which no two runs reproduce).
"""

from __future__ import annotations

from typing import Any

from oasr.features.spec import FeatureConfig

__all__ = ["funasr_wav_frontend", "lhotse_fbank", "torchaudio_fbank"]

# torchaudio.compliance.kaldi.fbank keyword -> our fbank param (same meaning, Kaldi's names).
_TORCHAUDIO_PARAMS = {
    "dither": "dither", "energy_floor": "energy_floor", "high_freq": "high_freq",
    "low_freq": "low_freq", "preemphasis_coefficient": "preemph_coeff",
    "raw_energy": "raw_energy", "remove_dc_offset": "remove_dc_offset",
    "round_to_power_of_two": "round_to_power_of_two", "snip_edges": "snip_edges",
    "use_energy": "use_energy", "use_log_fbank": "use_log_fbank", "use_power": "use_power",
    "window_type": "window_type", "blackman_coeff": "blackman_coeff",
}
# torchaudio's defaults that differ from Kaldi's (energy_floor: torchaudio 1.0, Kaldi 0.0).
_TORCHAUDIO_DEFAULTS = {"energy_floor": 1.0}


def lhotse_fbank(num_mel_bins: int = 80, sample_rate: int = 16000) -> FeatureConfig:
    """lhotse's ``FbankConfig`` defaults (= kaldifeat as icefall's pretrained.py sets it)."""
    return FeatureConfig(
        "fbank", sample_rate=sample_rate, num_mel_bins=num_mel_bins, frame_shift_ms=10.0,
        frame_length_ms=25.0,
        params={"snip_edges": False, "high_freq": -400.0, "low_freq": 20.0, "dither": 0.0,
                # lhotse's EPSILON; it floors the log energy, unused unless use_energy
                "energy_floor": 1e-10, "window_type": "povey", "preemph_coeff": 0.97,
                "remove_dc_offset": True, "raw_energy": True, "use_energy": False,
                "round_to_power_of_two": True, "use_power": True, "use_log_fbank": True},
    ).complete()


def torchaudio_fbank(sample_rate: int = 16000, audio_scale: float = 32768.0,
                     **kwargs: Any) -> FeatureConfig:
    """``torchaudio.compliance.kaldi.fbank(waveform * audio_scale, **kwargs)`` as a config;
    ``dither`` is 0 whatever ``kwargs`` say (decoding). A keyword torchaudio has that we do not
    compute (``subtract_mean``, VTLN, ``min_duration``, ``htk_compat``) raises by name."""
    kwargs = dict(kwargs)
    num_mel_bins = int(kwargs.pop("num_mel_bins", 23))
    frame_length = float(kwargs.pop("frame_length", 25.0))
    frame_shift = float(kwargs.pop("frame_shift", 10.0))
    kwargs.pop("sample_frequency", None)
    unknown = sorted(set(kwargs) - set(_TORCHAUDIO_PARAMS))
    if unknown:
        raise ValueError(f"torchaudio fbank options {unknown} are not computed by oasr's fbank; "
                         f"it takes {', '.join(sorted(_TORCHAUDIO_PARAMS))}")
    params = {_TORCHAUDIO_PARAMS[k]: v for k, v in {**_TORCHAUDIO_DEFAULTS, **kwargs}.items()}
    params.update(dither=0.0, audio_scale=float(audio_scale))
    return FeatureConfig("fbank", sample_rate=sample_rate, num_mel_bins=num_mel_bins,
                         frame_shift_ms=frame_shift, frame_length_ms=frame_length,
                         params=params).complete()


def funasr_wav_frontend(frontend_conf: dict[str, Any]) -> FeatureConfig:
    """FunASR's ``WavFrontend(**frontend_conf)``: ``kaldi.fbank`` of the samples x 2^15
    (``upsacle_samples``), ``window`` (hamming), ``energy_floor=0.0``, ``snip_edges``, then LFR
    ``lfr_m`` / ``lfr_n``."""
    conf = dict(frontend_conf)
    config = torchaudio_fbank(
        sample_rate=int(conf.get("fs", 16000)),
        audio_scale=32768.0 if conf.get("upsacle_samples", True) else 1.0,
        num_mel_bins=int(conf.get("n_mels", 80)), frame_length=conf.get("frame_length", 25),
        frame_shift=conf.get("frame_shift", 10), window_type=conf.get("window", "hamming"),
        energy_floor=0.0, snip_edges=bool(conf.get("snip_edges", True)))
    config.lfr_m, config.lfr_n = int(conf.get("lfr_m", 1)), int(conf.get("lfr_n", 1))
    return config
