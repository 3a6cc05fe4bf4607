"""NVIDIA NeMo's log-mel frontend as Parakeet uses it (``AudioToMelSpectrogramPreprocessor``,
transformers' ``ParakeetFeatureExtractor``), batched on the input's device.

Per row:
1. pre-emphasis ``y[t] = x[t] - 0.97 x[t-1]`` (``y[0] = x[0]``) over the row's samples, zero
   past its length;
2. |STFT|^2, n_fft = ``params['n_fft']`` (512), hop = frame_shift_ms (10 ms -> 160), a
   symmetric Hann window of frame_length_ms (25 ms -> 400) centred in n_fft, centred frames
   with zero padding;
3. Slaney-normalized Slaney-scale mel filters from 0 Hz to Nyquist, ``log(mel + 2^-24)``;
4. per-feature normalization over the row's valid frames (``length // hop`` of them):
   ``(x - mean) / (std + 1e-5)`` with the unbiased std, and padded frames zeroed
   (``params['normalize'] = 'none'``: no normalization, padded frames zeroed; Nemotron's
   cache-aware checkpoints read the raw log-mels).

Output (B, T // hop + 1, n_mels) fp32 and the valid frame counts. The per-utterance
normalization reads the whole row, so only ``normalize='none'`` streams
(``oasr.features.parakeet_streaming``; the spec, ``oasr.features.parakeet_spec``).
"""

from __future__ import annotations

import functools

import torch

from oasr.features.mel import mel_filters, stft_power
from oasr.features.spec import FeatureConfig

__all__ = ["parakeet_logmel"]

LOG_GUARD = 2.0 ** -24
STD_EPS = 1e-5


@functools.lru_cache(maxsize=8)
def _window(win: int, n_fft: int, device: torch.device) -> torch.Tensor:
    """A symmetric Hann window of ``win`` samples zero-padded to ``n_fft``, centred."""
    w = torch.hann_window(win, periodic=False, dtype=torch.float32, device=device)
    left = (n_fft - win) // 2
    return torch.nn.functional.pad(w, (left, n_fft - win - left))


def _geometry(config: FeatureConfig) -> tuple[int, int, int, float]:
    sr = config.sample_rate
    hop = round(sr * config.frame_shift_ms / 1000.0)
    win = round(sr * config.frame_length_ms / 1000.0)
    n_fft = int(config.params.get("n_fft", 512))
    pre = float(config.params.get("preemphasis", 0.97))
    if not 1 <= hop <= win <= n_fft:
        raise ValueError(f"parakeet_logmel needs 1 <= hop ({hop}) <= window ({win}) <= n_fft "
                         f"({n_fft}) samples")
    return n_fft, hop, win, pre


def _normalize(config: FeatureConfig) -> str:
    mode = str(config.params.get("normalize", "per_feature"))
    if mode not in ("per_feature", "none"):
        raise ValueError(f"parakeet_logmel normalize={mode!r} (valid: per_feature, none)")
    return mode


def parakeet_logmel(waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) float waveforms, (B,) valid samples -> ((B, T // hop + 1, n_mels) fp32, (B,))."""
    if waveforms.dim() != 2 or lengths.shape != (waveforms.shape[0],):
        raise ValueError(f"waveforms must be (B, T) and lengths (B,), got "
                         f"{tuple(waveforms.shape)} and {tuple(lengths.shape)}")
    n_fft, hop, win, pre = _geometry(config)
    device = waveforms.device
    x = waveforms.to(torch.float32)
    lengths = lengths.to(device=device, dtype=torch.int64)
    valid = torch.arange(x.shape[1], device=device)[None, :] < lengths[:, None]
    if pre:
        x = torch.cat([x[:, :1], x[:, 1:] - pre * x[:, :-1]], dim=1)
    x = torch.where(valid, x, torch.zeros((), device=device))
    sr = config.sample_rate
    filters = mel_filters(sr, n_fft, config.num_mel_bins, 0.0, sr / 2.0, device=device)
    with torch.autocast(device_type=device.type, enabled=False):
        power = stft_power(x, n_fft, hop, _window(win, n_fft, device), pad_mode="constant")
        if power.is_cuda and torch.backends.cuda.matmul.allow_tf32:
            mel = (power.double() @ filters.double()).float()
        else:
            mel = power @ filters
        feats = torch.log(mel + LOG_GUARD)  # (B, frames, n_mels)
        n = torch.div(lengths, hop, rounding_mode="floor")
        keep = (torch.arange(feats.shape[1], device=device)[None, :] < n[:, None])[..., None]
        if _normalize(config) == "none":
            return feats * keep, n
        masked = feats * keep
        count = n.clamp_min(1).to(torch.float32)[:, None, None]
        mean = masked.sum(dim=1, keepdim=True) / count
        var = ((masked - mean) ** 2 * keep).sum(dim=1, keepdim=True) / (count - 1).clamp_min(1)
        feats = (feats - mean) / (var.sqrt() + STD_EPS) * keep
    return feats, n
