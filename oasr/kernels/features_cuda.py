"""``features_cuda``: the Kaldi (``fbank``, ``mfcc``) and Whisper (``whisper_logmel``) frontends
on the GPU (oasr/csrc/kernels/features/).

Three launches around one cuFFT call (``torch.fft.rfft``):
1. framing: each output frame cut from its row with all of its preprocessing (Kaldi: scale,
   dither from a pre-drawn noise tensor, DC removal, log energy, preemphasis, window, zero padding
   to the FFT size; Whisper: the 30 s window, zeros past ``lengths``, reflect padding, Hann);
2. ``torch.fft.rfft`` over the frames: float64 for Kaldi, as its torch path (quiet mel bands sit
   ~1e-11 below a frame's peak, where float32 FFT rounding reaches 1e-2 in log), float32 for
   Whisper, as ``torch.stft``;
3. power (or magnitude), the mel filterbank applied sparsely (each filter's contiguous nonzero
   range, packed from the very matrix the torch path multiplies by), log; Kaldi zeroes frames past
   a row's count, Whisper gathers each row's max on the way and a last small kernel applies
   ``(max(x, row_max - 8) + 4) / 4``.

MFCC is this log-mel and energy followed by the torch path's DCT (a (n_mels, num_ceps) GEMM).
Dither is served: the noise is drawn as the torch path draws it (same generator, seed and shape)
and added in the framing kernel, so a CUDA call matches the torch path's CUDA call.

Declared gap (``oasr gaps``): ``features-large-fft``, a spectrum wider than one warp's shared
memory slice (more than 6144 fp64 bins: Kaldi FFTs past 12288 points, i.e. frames past 8192
samples with the power-of-two rounding, 512 ms at 16 kHz). Routing: the frontends ask their
``oasr.ops`` route (ops ``fbank``, ``mfcc``, ``whisper_logmel``, registered here with their
torch oracles), which counts each call as kernel, gap, out of scope or torch backend.
"""

from __future__ import annotations

import ctypes
import math
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from oasr.features import kaldi, whisper_logmel
from oasr.features.mel import hann_window, mel_filters
from oasr.features.spec import FeatureConfig
from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.kernels.declarations import FEATURES_LARGE_FFT, MAX_SPECTRUM_BYTES
from oasr.ops.build import FEATURES_CUDA

__all__ = ["FEATURES_LARGE_FFT", "fbank_cuda", "gap_for", "mfcc_cuda", "supports",
           "whisper_logmel_cuda"]

_LOG_NATURAL, _LOG10 = 1, 2

@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    """The library, its launchers' argtypes set from FEATURES_CUDA's checked table."""
    return jit.load(FEATURES_CUDA)


# -- scope ---------------------------------------------------------------------------------------


def gap_for(config: FeatureConfig) -> str | None:
    """The declared gap that keeps ``config`` off the kernels, or ``None`` when they serve it.

    Validates the config as the torch path does (the same errors, before any work).
    """
    kind = config.feature_type
    if kind in ("fbank", "mfcc"):
        p = kaldi.fbank_params(config) if kind == "fbank" else kaldi.mfcc_params(config)
        span, _ = kaldi.frame_geometry(config)
        spectrum_bytes = kaldi.fft_size(span, p) // 2 * 8
    elif kind == "whisper_logmel":
        n_fft, _, _, _ = whisper_logmel.whisper_geometry(config)
        spectrum_bytes = (n_fft // 2 + 1) * 4
    else:
        raise ValueError(f"no CUDA feature kernels for {kind!r}; they serve fbank, mfcc and "
                         "whisper_logmel")
    return FEATURES_LARGE_FFT.id if spectrum_bytes > MAX_SPECTRUM_BYTES else None


def supports(config: FeatureConfig) -> bool:
    """Whether the kernels serve ``config``; the rest is a declared gap (``gap_for``)."""
    return gap_for(config) is None


def _empty(shape: tuple[int, ...], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer the kernels fill (the tests poison it to catch an unwritten element)."""
    return torch.empty(shape, dtype=dtype, device=device)


# -- tables --------------------------------------------------------------------------------------


def _pack(filters: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(n_bins, n_mels) filters -> starts (n_mels,), offsets (n_mels + 1,), packed weights: each
    filter's first to last nonzero bin (zeros inside kept), in the filters' dtype."""
    f = filters.cpu().numpy()
    starts, offsets, parts = [], [0], []
    for m in range(f.shape[1]):
        nz = np.flatnonzero(f[:, m])
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        starts.append(lo)
        parts.append(f[lo:hi, m])
        offsets.append(offsets[-1] + hi - lo)
    weights = np.concatenate(parts) if offsets[-1] else np.zeros(1, f.dtype)
    to = {"device": device}
    return (torch.tensor(starts, dtype=torch.int32, **to),
            torch.tensor(offsets, dtype=torch.int32, **to), torch.from_numpy(weights).to(**to))


_TABLES: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = {}


def _kaldi_tables(config: FeatureConfig, p: dict[str, Any], n_fft: int,
                  device: torch.device) -> tuple[torch.Tensor, ...]:
    """Kaldi's filters, packed; cached per what the matrix depends on."""
    low, high = kaldi._mel_range(config, p)
    key = ("kaldi", config.sample_rate, config.num_mel_bins, low, high, n_fft, device)
    if key not in _TABLES:
        _TABLES[key] = _pack(kaldi.kaldi_filters(config, p, n_fft, "cpu"), device)
    return _TABLES[key]


def _whisper_tables(config: FeatureConfig, n_fft: int,
                    device: torch.device) -> tuple[torch.Tensor, ...]:
    sr, n_mels = config.sample_rate, config.num_mel_bins
    key = ("whisper", sr, n_mels, n_fft, device)
    if key not in _TABLES:
        _TABLES[key] = _pack(mel_filters(sr, n_fft, n_mels, 0.0, sr / 2.0, device="cpu"), device)
    return _TABLES[key]


# -- Kaldi ---------------------------------------------------------------------------------------


def _kaldi(waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig,
           p: dict[str, Any], mel: torch.Tensor, energy: torch.Tensor | None) -> None:
    """Log-mel into ``mel`` (B, T', n_mels), a view whose rows are ``mel.stride(1)`` apart,
    and log energy into ``energy`` (B, T') when given; frames past a row's count are zeros."""
    span, hop = kaldi.frame_geometry(config)
    n_fft = kaldi.fft_size(span, p)
    batch, n_out, n_mels = mel.shape
    device = waveforms.device
    frame_lens = kaldi.num_frames(lengths, span, hop)
    x = waveforms.to(torch.float32).contiguous()
    starts, offsets, weights = _kaldi_tables(config, p, n_fft, device)
    noise = None
    if p["dither"]:
        # Drawn exactly as the torch path draws it, so the two agree on the same device.
        gen = torch.Generator(device=device).manual_seed(int(p["dither_seed"]))
        noise = torch.randn((batch, n_out, span), generator=gen, device=device)
    window = kaldi._window(p["window_type"], span, float(p["blackman_coeff"]), device)
    floor = float(p["energy_floor"])
    log_floor = math.log(floor) if floor > 0.0 else -math.inf
    frames = _empty((batch, n_out, n_fft), dtype=torch.float64, device=device)
    lib, stream = _library(), stream_handle(device)
    check(lib, lib.oasr_features_kaldi_frames(
        ptr(x), batch, x.shape[1], ptr(frame_lens), ptr(noise), ptr(window), span, hop, n_fft,
        n_out, float(p["audio_scale"]), float(p["dither"]), int(bool(p["remove_dc_offset"])),
        float(p["preemph_coeff"]), int(bool(p["raw_energy"])), log_floor, ptr(frames),
        ptr(energy), 0 if energy is None else energy.stride(1), stream), "kaldi framing")
    spec = torch.view_as_real(torch.fft.rfft(frames)).contiguous()  # (B, T', n_fft // 2 + 1, 2)
    del frames
    log_kind = _LOG_NATURAL if p.get("use_log_fbank", True) else 0
    check(lib, lib.oasr_features_mel_log_f64(
        ptr(spec), batch, n_out, spec.shape[2], n_fft // 2, ptr(starts), ptr(offsets),
        ptr(weights), n_mels, int(not p.get("use_power", True)), log_kind, kaldi.FLT_EPSILON,
        ptr(frame_lens), ptr(mel), mel.stride(1), None, stream), "kaldi mel")


def _kaldi_prologue(waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig,
                    p: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Shape checks as the torch path's; -> (waveforms and lengths in snip_edges form, as the
    torch path rewrites them (``kaldi.snip_input``: centred frames' samples gathered on the
    device), T')."""
    if waveforms.dim() != 2:
        raise ValueError(f"waveforms must be (B, T), got shape {tuple(waveforms.shape)}")
    if lengths.shape != (waveforms.shape[0],):
        raise ValueError(
            f"lengths must be (B,) = ({waveforms.shape[0]},), got shape {tuple(lengths.shape)}"
        )
    span, hop = kaldi.frame_geometry(config)
    kaldi.kaldi_filters(config, p, kaldi.fft_size(span, p), "cpu")  # bad ranges raise, always
    lengths = lengths.to(device=waveforms.device, dtype=torch.int64).clamp(
        0, waveforms.shape[1])
    waveforms, lengths = kaldi.snip_input(waveforms, lengths, span, hop, bool(p["snip_edges"]))
    total = waveforms.shape[1]
    return waveforms, lengths, (total - span) // hop + 1 if total >= span else 0


def fbank_cuda(waveforms: torch.Tensor, lengths: torch.Tensor,
               config: FeatureConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``oasr.features.kaldi.fbank`` on the GPU: the same signature, layout and values."""
    p = kaldi.fbank_params(config)
    waveforms, lengths, n_out = _kaldi_prologue(waveforms, lengths, config, p)
    span, hop = kaldi.frame_geometry(config)
    batch, n_mels = waveforms.shape[0], config.num_mel_bins
    lead = 1 if p["use_energy"] else 0
    feats = _empty((batch, n_out, lead + n_mels), dtype=torch.float32,
                        device=waveforms.device)
    if feats.numel():
        with torch.cuda.device(waveforms.device), torch.autocast("cuda", enabled=False):
            _kaldi(waveforms, lengths, config, p, feats[..., lead:],
                   feats[..., 0] if lead else None)
    return feats, kaldi.num_frames(lengths, span, hop)


def mfcc_cuda(waveforms: torch.Tensor, lengths: torch.Tensor,
              config: FeatureConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``oasr.features.kaldi.mfcc`` on the GPU: the kernels' log-mel and energy, then the torch
    path's DCT."""
    p = kaldi.mfcc_params(config)
    waveforms, lengths, n_out = _kaldi_prologue(waveforms, lengths, config, p)
    span, hop = kaldi.frame_geometry(config)
    batch, device = waveforms.shape[0], waveforms.device
    mel = _empty((batch, n_out, config.num_mel_bins), dtype=torch.float32, device=device)
    energy = _empty((batch, n_out), dtype=torch.float32, device=device)
    frame_lens = kaldi.num_frames(lengths, span, hop)
    if mel.numel():
        with torch.cuda.device(device), torch.autocast("cuda", enabled=False):
            _kaldi(waveforms, lengths, config, p, mel, energy)
    return kaldi.cepstra(mel, energy, frame_lens, config, p), frame_lens


# -- Whisper -------------------------------------------------------------------------------------


def whisper_logmel_cuda(waveforms: torch.Tensor, lengths: torch.Tensor,
                        config: FeatureConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``oasr.features.whisper_logmel.whisper_logmel`` on the GPU: the same signature, layout and
    values (every frame computed, none masked, as Whisper's encoder reads the whole window)."""
    whisper_logmel.check_shapes(waveforms, lengths)
    n_fft, hop, window_samples, n_frames = whisper_logmel.whisper_geometry(config)
    device, n_mels = waveforms.device, config.num_mel_bins
    starts, offsets, weights = _whisper_tables(config, n_fft, device)
    lengths = lengths.to(device=device, dtype=torch.int64).clamp(0, window_samples)
    batch = waveforms.shape[0]
    feats = _empty((batch, n_frames, n_mels), dtype=torch.float32, device=device)
    if feats.numel():
        with torch.cuda.device(device), torch.autocast("cuda", enabled=False):
            x = waveforms.to(torch.float32).contiguous()
            window = hann_window(n_fft, device=device)
            frames = _empty((batch, n_frames, n_fft), dtype=torch.float32, device=device)
            lib, stream = _library(), stream_handle(device)
            check(lib, lib.oasr_features_whisper_frames(
                ptr(x), batch, x.shape[1], ptr(lengths), ptr(window), n_fft, hop, n_fft,
                window_samples, n_frames, ptr(frames), stream), "whisper framing")
            spec = torch.view_as_real(torch.fft.rfft(frames)).contiguous()  # (B, F, bins, 2)
            del frames
            row_max = torch.zeros(batch, dtype=torch.int32, device=device)
            check(lib, lib.oasr_features_mel_log_f32(
                ptr(spec), batch, n_frames, spec.shape[2], spec.shape[2], ptr(starts),
                ptr(offsets), ptr(weights), n_mels, 0, _LOG10, whisper_logmel.LOG_FLOOR,
                None, ptr(feats), n_mels, ptr(row_max), stream), "whisper mel")
            check(lib, lib.oasr_features_whisper_normalize(
                ptr(feats), ptr(row_max), batch, n_frames * n_mels,
                whisper_logmel.DYNAMIC_RANGE, stream), "whisper normalize")
    return feats, whisper_logmel.feat_lengths(lengths, hop, n_frames)


def route_supports(waveforms: torch.Tensor, config: FeatureConfig) -> bool:
    """Ops ``fbank`` / ``mfcc`` / ``whisper_logmel``'s ``supports``: the route sees
    (waveforms, config)."""
    return gap_for(config) is None
