"""Whisper's log-mel frontend, batched and on the input's device.

Per row, exactly as Whisper (and transformers' ``WhisperFeatureExtractor``) computes it:
1. keep the row's first ``lengths[b]`` samples, zero the rest, and pad or trim to the fixed
   window (``chunk_seconds``, 30 s -> 480000 samples at 16 kHz);
2. |STFT|^2 with a periodic Hann window, n_fft = frame_length_ms (25 ms -> 400), hop =
   frame_shift_ms (10 ms -> 160), centered with reflect padding; the last frame is dropped,
   leaving window / hop frames (3000);
3. Slaney-normalized Slaney-scale mel filters from 0 Hz to Nyquist (``num_mel_bins``: 80, or 128
   for large-v3), log10 of max(mel, 1e-10);
4. max(x, max_over_row(x) - 8), then (x + 4) / 4.

Layout: Whisper's native layout is (n_mels, 3000) per row; ours is BTC, (B, 3000, n_mels), like
every frontend. ``feat_lengths[b] = min(ceil(lengths[b] / hop), window frames)`` counts the frames
centered inside the real audio (frame i is centered on sample i * hop), the count transformers'
attention mask gives;
the frames after it cover only padding, which the Whisper encoder sees anyway (it always
attends over the full window).

Devices: on a CUDA input the CUDA kernels serve it (``oasr.kernels.features_cuda``: framing,
cuFFT, sparse mel + log10, the row clamp), routed and counted by ``oasr.ops``; a config they do not
cover is a declared, counted gap served by ``whisper_logmel_native`` (this module's torch code),
which also serves CPU inputs and ``OASR_LAYERS_BACKEND=torch``.
"""

from __future__ import annotations

import torch

from oasr import ops
from oasr.features.mel import hann_window, mel_filters, stft_power
from oasr.features.spec import ExtractorSpec, FeatureConfig

# The CUDA kernels register when oasr.kernels.features_cuda is imported, at the first routed call.
_WHISPER_LOGMEL = ops.route("whisper_logmel", "features-large-fft", scope=ops.CUDA,
                            provider="oasr.kernels.features_cuda")

DEFAULT_CHUNK_SECONDS = 30.0
LOG_FLOOR = 1e-10
DYNAMIC_RANGE = 8.0  # log10 units kept below each row's peak (80 dB)


def whisper_geometry(config: FeatureConfig) -> tuple[int, int, int, int]:
    """(n_fft, hop, window_samples, frames) in samples / frames."""
    sr = config.sample_rate
    n_fft = round(sr * config.frame_length_ms / 1000.0)
    hop = round(sr * config.frame_shift_ms / 1000.0)
    window_samples = round(float(config.params.get("chunk_seconds", DEFAULT_CHUNK_SECONDS)) * sr)
    if n_fft < 2 or hop < 1 or n_fft // 2 >= window_samples:
        # The centered STFT reflects n_fft // 2 samples at each end of the window.
        raise ValueError(
            f"frame_length_ms={config.frame_length_ms} / frame_shift_ms={config.frame_shift_ms} "
            f"/ chunk_seconds at {sr} Hz give n_fft={n_fft}, hop={hop}, window={window_samples} "
            "samples; need n_fft >= 2, hop >= 1 and n_fft // 2 < window"
        )
    return n_fft, hop, window_samples, window_samples // hop


def check_shapes(waveforms: torch.Tensor, lengths: torch.Tensor) -> None:
    if waveforms.dim() != 2:
        raise ValueError(f"waveforms must be (B, T), got shape {tuple(waveforms.shape)}")
    if lengths.shape != (waveforms.shape[0],):
        raise ValueError(
            f"lengths must be (B,) = ({waveforms.shape[0]},), got shape {tuple(lengths.shape)}"
        )


def feat_lengths(lengths: torch.Tensor, hop: int, n_frames: int) -> torch.Tensor:
    """Frames centered inside the real audio: ceil(lengths / hop), at most the window's."""
    return torch.div(lengths + hop - 1, hop, rounding_mode="floor").clamp_max(n_frames)


def whisper_logmel(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) float waveforms with valid ``lengths`` (B,) -> ((B, frames, n_mels) fp32, (B,) int64).

    frames = chunk_seconds * 1000 / frame_shift_ms (3000 for Whisper). Rows longer than the
    window are trimmed to it, as Whisper does; callers cut long recordings into windows first.
    """
    kernel = _WHISPER_LOGMEL.select(waveforms, config)
    if kernel is not None:
        return kernel(waveforms, lengths, config)
    return whisper_logmel_native(waveforms, lengths, config)


def whisper_logmel_native(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """``whisper_logmel`` in torch ops, on the input's device: the CPU path and the kernels'
    oracle."""
    check_shapes(waveforms, lengths)
    n_fft, hop, window_samples, n_frames = whisper_geometry(config)
    sr = config.sample_rate
    device = waveforms.device

    x = waveforms.to(torch.float32)
    batch, total = x.shape
    lengths = lengths.to(device=device, dtype=torch.int64).clamp(0, window_samples)
    if total >= window_samples:
        x = x[:, :window_samples]
    else:
        x = torch.nn.functional.pad(x, (0, window_samples - total))
    valid = torch.arange(window_samples, device=device) < lengths[:, None]
    x = torch.where(valid, x, torch.zeros((), device=device))  # (B, window_samples)

    filters = mel_filters(sr, n_fft, config.num_mel_bins, 0.0, sr / 2.0, device=device)
    if batch == 0:
        feats = x.new_zeros((0, n_frames, config.num_mel_bins))
    else:
        # Features are fp32 whatever autocast the model runs under.
        with torch.autocast(device_type=device.type, enabled=False):
            power = stft_power(x, n_fft, hop, hann_window(n_fft, device=device))
            mel = _project(power[:, :n_frames], filters)  # (B, n_frames, n_mels)
            logmel = mel.clamp_min(LOG_FLOOR).log10()
            peak = logmel.amax(dim=(1, 2), keepdim=True)  # (B, 1, 1)
            feats = (torch.maximum(logmel, peak - DYNAMIC_RANGE) + 4.0) / 4.0
    return feats, feat_lengths(lengths, hop, n_frames)


def _project(power: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """(B, T', F) @ (F, n_mels). Where TF32 GEMMs are allowed (for the model's sake), TF32 would
    keep 10 mantissa bits of the power; this product is small, so it runs in fp64 instead."""
    if power.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        return (power.double() @ filters.double()).float()
    return power @ filters


WHISPER_LOGMEL = ExtractorSpec(
    kind="whisper_logmel",
    fn=whisper_logmel,
    framing=None,  # normalizes against each window's peak, so it cannot consume a growing buffer
    window_seconds_attr="chunk_seconds",
    defaults={"chunk_seconds": DEFAULT_CHUNK_SECONDS},
    doc=(
        "Whisper log-mel: each row padded/trimmed to params['chunk_seconds'] (default 30 s), "
        "25 ms Hann STFT every 10 ms, num_mel_bins Slaney mels, log10 clamped to the row's peak "
        "- 8, scaled (x + 4) / 4. Output (B, 3000, n_mels)."
    ),
)
