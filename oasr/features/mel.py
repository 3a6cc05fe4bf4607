"""Mel filterbanks and the STFT power spectrum, shared by the log-mel frontends.

Filters are built from the formulas (Slaney's auditory-toolbox scale or HTK's), in float64, and
cached per device; nothing here imports librosa or transformers.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

MEL_SCALES = ("slaney", "htk")
MEL_NORMS = (None, "slaney")

# Slaney's scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above.
_SLANEY_F_SP = 200.0 / 3
_SLANEY_MIN_LOG_HZ = 1000.0
_SLANEY_MIN_LOG_MEL = _SLANEY_MIN_LOG_HZ / _SLANEY_F_SP
_SLANEY_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(freq: np.ndarray | float, mel_scale: str = "slaney") -> np.ndarray:
    f = np.asarray(freq, dtype=np.float64)
    if mel_scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    if mel_scale == "slaney":
        linear = f / _SLANEY_F_SP
        log = (
            _SLANEY_MIN_LOG_MEL
            + np.log(np.maximum(f, _SLANEY_MIN_LOG_HZ) / _SLANEY_MIN_LOG_HZ) / _SLANEY_LOGSTEP
        )
        return np.where(f >= _SLANEY_MIN_LOG_HZ, log, linear)
    raise ValueError(f"unknown mel_scale {mel_scale!r}; valid: {', '.join(MEL_SCALES)}")


def mel_to_hz(mels: np.ndarray | float, mel_scale: str = "slaney") -> np.ndarray:
    m = np.asarray(mels, dtype=np.float64)
    if mel_scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    if mel_scale == "slaney":
        linear = m * _SLANEY_F_SP
        log = _SLANEY_MIN_LOG_HZ * np.exp(_SLANEY_LOGSTEP * (m - _SLANEY_MIN_LOG_MEL))
        return np.where(m >= _SLANEY_MIN_LOG_MEL, log, linear)
    raise ValueError(f"unknown mel_scale {mel_scale!r}; valid: {', '.join(MEL_SCALES)}")


def mel_filters_np(
    sample_rate: int,
    n_fft: int,
    n_mels: int,
    f_min: float = 0.0,
    f_max: float | None = None,
    norm: str | None = "slaney",
    mel_scale: str = "slaney",
    triangular_in_mel: bool = False,
) -> np.ndarray:
    """Triangular mel filters as (n_fft // 2 + 1, n_mels) float64.

    Band edges are ``n_mels + 2`` points equally spaced on the mel scale between f_min and f_max
    (default: Nyquist); each filter rises linearly from its left edge to its center and falls to
    its right edge, linear in Hz (librosa, Whisper) or in mel (``triangular_in_mel``, Kaldi).
    norm="slaney" scales each filter to unit area in Hz (2 / band width), so wide high bands do
    not dominate.
    """
    if norm not in MEL_NORMS:
        raise ValueError(f"unknown mel norm {norm!r}; valid: None, 'slaney'")
    if mel_scale not in MEL_SCALES:
        raise ValueError(f"unknown mel_scale {mel_scale!r}; valid: {', '.join(MEL_SCALES)}")
    f_max = sample_rate / 2.0 if f_max is None else float(f_max)
    if not 0.0 <= f_min < f_max <= sample_rate / 2.0:
        raise ValueError(
            f"need 0 <= f_min < f_max <= sample_rate / 2, got f_min={f_min}, f_max={f_max}, "
            f"sample_rate={sample_rate}"
        )
    fft_freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges_mel = np.linspace(hz_to_mel(f_min, mel_scale), hz_to_mel(f_max, mel_scale), n_mels + 2)
    edges_hz = mel_to_hz(edges_mel, mel_scale)
    if triangular_in_mel:
        points, edges = hz_to_mel(fft_freqs, mel_scale), edges_mel
    else:
        points, edges = fft_freqs, edges_hz
    left, center, right = edges[:-2], edges[1:-1], edges[2:]  # (n_mels,) each
    rising = (points[:, None] - left) / (center - left)
    falling = (right - points[:, None]) / (right - center)
    filters = np.maximum(0.0, np.minimum(rising, falling))  # (n_freq, n_mels)
    if norm == "slaney":
        filters *= 2.0 / (edges_hz[2:] - edges_hz[:-2])
    return filters


@functools.lru_cache(maxsize=32)
def _mel_filters_cached(
    key: tuple[int, int, int, float, float | None, str | None, str, bool],
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor:
    return torch.from_numpy(mel_filters_np(*key)).to(device=device, dtype=dtype)


def mel_filters(
    sample_rate: int,
    n_fft: int,
    n_mels: int,
    f_min: float = 0.0,
    f_max: float | None = None,
    norm: str | None = "slaney",
    mel_scale: str = "slaney",
    triangular_in_mel: bool = False,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``mel_filters_np`` as a (n_fft // 2 + 1, n_mels) tensor on ``device``.

    Cached per arguments and device: callers must not modify the returned tensor.
    """
    key = (
        sample_rate,
        n_fft,
        n_mels,
        float(f_min),
        None if f_max is None else float(f_max),
        norm,
        mel_scale,
        triangular_in_mel,
    )
    return _mel_filters_cached(key, torch.device(device or "cpu"), dtype)


@functools.lru_cache(maxsize=32)
def _hann_cached(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.hann_window(n, periodic=True, device=device, dtype=dtype)


def hann_window(
    n: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Periodic Hann window (n,) (``0.5 - 0.5 cos(2 pi k / n)``), cached; do not modify it."""
    return _hann_cached(n, torch.device(device or "cpu"), dtype)


def stft_power(
    waveforms: torch.Tensor,
    n_fft: int,
    hop_length: int,
    window: torch.Tensor,
    center: bool = True,
    pad_mode: str = "reflect",
) -> torch.Tensor:
    """|STFT|^2 of each row: (B, T) float32 -> (B, frames, n_fft // 2 + 1) float32.

    center=True pads ``n_fft // 2`` on both sides (``pad_mode``), giving ``T // hop + 1``
    frames; frames come first so a (F, n_mels) filterbank applies as one matmul into BTC.
    """
    spec = torch.stft(
        waveforms,
        n_fft,
        hop_length,
        window=window,
        center=center,
        pad_mode=pad_mode,
        return_complex=True,
    )  # (B, F, frames) complex
    power = spec.real.square() + spec.imag.square()  # no sqrt round trip through abs()
    return power.transpose(1, 2)
