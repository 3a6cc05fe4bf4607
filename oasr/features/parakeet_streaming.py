"""``parakeet_logmel`` chunk by chunk, for the unnormalized form (``normalize: none``, what
Nemotron's cache-aware checkpoints read): the frames concatenate to the offline frames.

Offline frame k reads the pre-emphasized samples ``[k * hop - n_fft / 2, k * hop + n_fft / 2)``
(zeros before the first and past the last sample) and a row has ``samples // hop`` valid
frames. A stream keeps the pre-emphasized samples from its next frame's first sample on
(``n_fft / 2`` zeros to start) and the last raw sample (pre-emphasis reads it); a frame comes
out once its window is whole. The last frames read zeros past the end, so they come out of
``parakeet_logmel_flush`` when the input ends. Per-feature normalization reads the whole
utterance and is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oasr.features.mel import mel_filters, stft_power
from oasr.features.parakeet_logmel import LOG_GUARD, _geometry, _normalize, _window
from oasr.features.spec import FeatureConfig

__all__ = ["ParakeetStreamState", "parakeet_logmel_flush", "parakeet_logmel_streaming"]


@dataclass
class ParakeetStreamState:
    """pending: pre-emphasized samples from the next frame's first on; last: the last raw
    sample (None before any); frames: frames emitted; samples: samples accepted."""

    pending: torch.Tensor
    last: float | None = None
    frames: int = 0
    samples: int = 0


def _check(config: FeatureConfig) -> None:
    if _normalize(config) != "none":
        raise ValueError("parakeet_logmel with per-feature normalization reads the whole "
                         "utterance and cannot stream; only normalize='none' streams")


def _frames(buf: torch.Tensor, count: int, config: FeatureConfig) -> torch.Tensor:
    n_fft, hop, win, _ = _geometry(config)
    if count <= 0:
        return buf.new_zeros(0, config.num_mel_bins)
    span = buf[:(count - 1) * hop + n_fft]
    sr = config.sample_rate
    filters = mel_filters(sr, n_fft, config.num_mel_bins, 0.0, sr / 2.0, device=buf.device)
    power = stft_power(span[None], n_fft, hop, _window(win, n_fft, buf.device), center=False)
    return torch.log(power[0] @ filters + LOG_GUARD)


def parakeet_logmel_streaming(audio: torch.Tensor, state: ParakeetStreamState | None,
                              config: FeatureConfig
                              ) -> tuple[torch.Tensor, ParakeetStreamState]:
    """audio (T,) at ``config.sample_rate`` -> the frames whose window is whole (T', F) fp32,
    and the next state."""
    _check(config)
    if audio.dim() != 1:
        raise ValueError(f"audio must be (T,), got shape {tuple(audio.shape)}")
    n_fft, hop, _, pre = _geometry(config)
    x = audio.to(torch.float32)
    if state is None:
        state = ParakeetStreamState(pending=x.new_zeros(n_fft // 2))
    if x.shape[0]:
        y = x.clone()
        if pre:
            y[1:] = x[1:] - pre * x[:-1]
            if state.last is not None:
                y[0] = x[0] - pre * state.last
        state = ParakeetStreamState(torch.cat([state.pending.to(x.device), y]),
                                    float(x[-1]), state.frames, state.samples + x.shape[0])
    buf = state.pending
    count = (buf.shape[0] - n_fft) // hop + 1 if buf.shape[0] >= n_fft else 0
    count = min(count, state.samples // hop - state.frames)
    feats = _frames(buf, count, config)
    return feats, ParakeetStreamState(buf[count * hop:], state.last, state.frames + count,
                                      state.samples)


def parakeet_logmel_flush(state: ParakeetStreamState | None, config: FeatureConfig
                          ) -> torch.Tensor:
    """The input ended: its last frames (those reading past the end), (T', F) fp32."""
    _check(config)
    if state is None:
        return torch.zeros(0, config.num_mel_bins)
    n_fft, _, _, _ = _geometry(config)
    buf = torch.cat([state.pending, state.pending.new_zeros(n_fft // 2)])
    return _frames(buf, state.samples // _geometry(config)[1] - state.frames, config)
