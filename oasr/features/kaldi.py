"""Kaldi-compatible log-mel filterbank (``fbank``) and MFCC (``mfcc``) frontends, batched and on
the input's device.

Per row, as Kaldi's ``compute-fbank-feats`` / ``compute-mfcc-feats`` (and kaldi-native-fbank, the
test oracle; lhotse's ``Fbank`` and kaldifeat likewise) compute it:
1. scale the samples by ``audio_scale`` (WeNet-style models were trained on 16-bit-scaled audio:
   32768.0);
2. cut frames of ``frame_length_ms`` every ``frame_shift_ms``, both truncated to whole samples
   as Kaldi does. With ``snip_edges`` (Kaldi's default) a row of ``n`` samples yields
   ``(n - span) // hop + 1`` frames (none when ``n < span``), each wholly inside the row;
   without it (lhotse / kaldifeat / icefall) ``(n + hop // 2) // hop`` frames, frame k starting
   at ``k * hop + hop // 2 - span // 2``, the row reflected at both of its ends
   (``snip_input`` gathers those samples, so everything after is the snip_edges pipeline);
3. per frame: add Gaussian dither (only when ``dither`` is nonzero, from a seeded generator),
   subtract the frame's mean, take the raw log energy, preemphasize (``x[i] - c x[i-1]``, with
   ``x[0] - c x[0]`` first), multiply by the window (Povey's by default);
4. zero-pad to the next power of two, |rfft|^2 (in float64), project onto Kaldi's mel filters
   (triangles in mel space, ``1127 ln(1 + f / 700)``, from ``low_freq`` to ``high_freq``, the
   Nyquist bin unused), ``log(max(x, FLT_EPSILON))`` in float32;
5. mfcc only: DCT-II with Kaldi's orthonormal scaling down to ``num_ceps``, cepstral liftering;
   with ``use_energy`` the raw log energy replaces C0 (mfcc) or is prepended (fbank).

Layout: (B, T', F) with ``T'`` the frame count of the batch width ``T``, so it equals the
longest row's count when the batch is padded to its longest row; frames past a row's own count
are zero. No host sync: every shape follows from ``T`` and the config.

Streaming: each frame depends only on its own ``span`` samples, so a stream reproduces offline
features exactly (``oasr.features.kaldi_streaming``; the registered specs, which join the two,
are ``oasr.features.kaldi_specs``); ``kaldi_framing(config)`` gives the grid.

Devices: ``fbank`` / ``mfcc`` on a CUDA input run the CUDA kernels (``oasr.kernels.features_cuda``:
framing, cuFFT, sparse mel + log), routed and counted by ``oasr.ops``; a config they do not
cover is a declared, counted gap served by the torch code here (``fbank_native`` /
``mfcc_native``), which also serves CPU inputs (out of scope) and ``OASR_LAYERS_BACKEND=torch``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
import torch

from oasr import ops
from oasr.features.mel import mel_filters
from oasr.features.spec import FeatureConfig, StreamingFraming

# The CUDA kernels register under these ops when oasr.kernels.features_cuda is imported (at the
# first routed call); CPU inputs are out of scope.
_KERNELS = "oasr.kernels.features_cuda"
_FBANK = ops.route("fbank", "features-large-fft", scope=ops.CUDA, provider=_KERNELS)
_MFCC = ops.route("mfcc", "features-large-fft", scope=ops.CUDA, provider=_KERNELS)

FLT_EPSILON = float(np.finfo(np.float32).eps)  # Kaldi's log floor, 2 ** -23
WINDOW_TYPES = ("povey", "hamming", "hanning", "rectangular", "sine", "blackman")

_FRAME_DEFAULTS: dict[str, Any] = {
    "audio_scale": 1.0,
    # Kaldi's default; lhotse, kaldifeat and icefall use False (frames centred on k * hop + hop / 2,
    # the signal reflected at both ends). A bundle written before this key existed keeps True.
    "snip_edges": True,
    "dither": 0.0,
    "dither_seed": 0,
    "preemph_coeff": 0.97,
    "remove_dc_offset": True,
    "window_type": "povey",
    "blackman_coeff": 0.42,
    "round_to_power_of_two": True,
    "low_freq": 20.0,
    "high_freq": 0.0,
    "energy_floor": 0.0,
    "raw_energy": True,
}
FBANK_DEFAULTS: dict[str, Any] = {
    **_FRAME_DEFAULTS,
    "use_energy": False,
    "use_log_fbank": True,
    "use_power": True,
}
MFCC_DEFAULTS: dict[str, Any] = {
    **_FRAME_DEFAULTS,
    "use_energy": True,
    "num_ceps": 13,
    "cepstral_lifter": 22.0,
}


# -- geometry ----------------------------------------------------------------------------------


def _kaldi_samples(sample_rate: int, ms: float) -> int:
    # Kaldi computes samp_freq * 0.001f * ms in float32 and truncates.
    f32 = np.float32
    return int(f32(f32(sample_rate) * f32(0.001)) * f32(ms))


def frame_geometry(config: FeatureConfig) -> tuple[int, int]:
    """(span, hop) in samples: the frame length and the frame shift."""
    span = _kaldi_samples(config.sample_rate, config.frame_length_ms)
    hop = _kaldi_samples(config.sample_rate, config.frame_shift_ms)
    if span < 2 or hop < 1:
        raise ValueError(
            f"frame_length_ms={config.frame_length_ms} / frame_shift_ms={config.frame_shift_ms} "
            f"at {config.sample_rate} Hz give {span} / {hop} samples; need >= 2 / >= 1"
        )
    return span, hop


def kaldi_framing(config: FeatureConfig) -> StreamingFraming:
    """The frame grid of ``config``: history = span - hop; prefill = the reflected samples
    before frame 0 without snip_edges (``centred_offset``), none with it."""
    span, hop = frame_geometry(config)
    snip = bool(config.params.get("snip_edges", _FRAME_DEFAULTS["snip_edges"]))
    framing = _framing(span, hop)
    return framing if snip else dataclasses.replace(framing, prefill=centred_offset(span, hop))


def _framing(span: int, hop: int) -> StreamingFraming:
    return StreamingFraming(span=span, hop=hop, history=max(span - hop, 0), prefill=0)


def num_frames(lengths: torch.Tensor, span: int, hop: int) -> torch.Tensor:
    """snip_edges frame counts: (B,) samples -> (B,) int64 frames."""
    lengths = lengths.to(torch.int64)
    return torch.where(
        lengths >= span,
        torch.div(lengths - span, hop, rounding_mode="floor") + 1,
        torch.zeros_like(lengths),
    )


def centred_offset(span: int, hop: int) -> int:
    """Samples before sample 0 that frame 0 reads without snip_edges (Kaldi's
    ``FirstSampleOfFrame``: frame k starts at ``k * hop + hop // 2 - span // 2``)."""
    return span // 2 - hop // 2


def centred_num_frames(lengths: torch.Tensor, hop: int) -> torch.Tensor:
    """Frame counts without snip_edges: ``(n + hop // 2) // hop``, (B,) int64."""
    return torch.div(lengths.to(torch.int64) + hop // 2, hop, rounding_mode="floor")


def reflect_index(positions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Kaldi's reflection of positions outside ``[0, n)`` (``-s - 1`` before, ``2n - 1 - s``
    after, repeated until inside): the symmetric signal has period ``2n``. (B, W), (B,) ->
    (B, W) indices; a row with ``n = 0`` maps to 0."""
    n = lengths.clamp_min(1).unsqueeze(1)
    m = torch.remainder(positions, 2 * n)
    return torch.where(m < n, m, 2 * n - 1 - m)


def snip_input(waveforms: torch.Tensor, lengths: torch.Tensor, span: int, hop: int,
               snip_edges: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch in snip_edges form: unchanged with ``snip_edges``; otherwise each row
    rewritten as the samples its centred frames read (reflected at the row's own ends), so
    cutting whole frames of it from sample 0 gives Kaldi's ``snip_edges=false`` frames and
    ``num_frames`` of the new lengths gives ``centred_num_frames`` of the old.

    (B, T), (B,) clamped to [0, T] -> (B, span + (M - 1) * hop) and (B,), M the frame count
    of the width T (0 frames: width 0)."""
    if snip_edges:
        return waveforms, lengths
    total = waveforms.shape[1]
    n_out = (total + hop // 2) // hop
    width = span + (n_out - 1) * hop if n_out > 0 else 0
    frames = centred_num_frames(lengths, hop)
    new_lengths = torch.where(frames > 0, span + (frames - 1) * hop, torch.zeros_like(frames))
    positions = torch.arange(width, device=waveforms.device) - centred_offset(span, hop)
    index = reflect_index(positions.unsqueeze(0).expand(waveforms.shape[0], width), lengths)
    return waveforms.gather(1, index), new_lengths


# -- constant tables ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _window(kind: str, n: int, blackman_coeff: float, device: torch.device) -> torch.Tensor:
    i = np.arange(n, dtype=np.float64)
    a = 2.0 * math.pi / (n - 1)
    if kind == "povey":  # Hann raised to 0.85: like Hamming, but reaching zero at the edges
        w = (0.5 - 0.5 * np.cos(a * i)) ** 0.85
    elif kind == "hamming":
        w = 0.54 - 0.46 * np.cos(a * i)
    elif kind == "hanning":
        w = 0.5 - 0.5 * np.cos(a * i)
    elif kind == "rectangular":
        w = np.ones(n)
    elif kind == "sine":
        w = np.sin(0.5 * a * i)
    elif kind == "blackman":
        w = blackman_coeff - 0.5 * np.cos(a * i) + (0.5 - blackman_coeff) * np.cos(2 * a * i)
    else:
        raise ValueError(f"unknown window_type {kind!r}; valid: {', '.join(WINDOW_TYPES)}")
    return torch.from_numpy(w.astype(np.float32)).to(device)


@functools.lru_cache(maxsize=32)
def _cepstral_matrix(
    num_ceps: int, num_bins: int, lifter: float, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """(num_bins, num_ceps): Kaldi's DCT (row 0 sqrt(1/N), row k sqrt(2/N) cos(pi k (n + 1/2) / N))
    with the lifter ``1 + Q/2 sin(pi k / Q)`` folded into its columns."""
    k = np.arange(num_ceps, dtype=np.float64)[:, None]
    n = np.arange(num_bins, dtype=np.float64)[None, :]
    dct = np.sqrt(2.0 / num_bins) * np.cos(math.pi / num_bins * (n + 0.5) * k)
    dct[0] = np.sqrt(1.0 / num_bins)
    if lifter != 0.0:
        dct *= 1.0 + 0.5 * lifter * np.sin(math.pi * k / lifter)
    return torch.from_numpy(dct.T.copy()).to(device=device, dtype=dtype)


# -- params ------------------------------------------------------------------------------------


def _resolve(config: FeatureConfig, defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(config.params) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown {config.feature_type} params {unknown}; valid: {', '.join(sorted(defaults))}"
        )
    p = {**defaults, **config.params}
    if p["window_type"] not in WINDOW_TYPES:
        raise ValueError(
            f"unknown window_type {p['window_type']!r}; valid: {', '.join(WINDOW_TYPES)}"
        )
    if not 0.0 <= float(p["preemph_coeff"]) <= 1.0:
        raise ValueError(f"preemph_coeff must be in [0, 1], got {p['preemph_coeff']}")
    if config.num_mel_bins < 3:
        raise ValueError(f"num_mel_bins must be >= 3, got {config.num_mel_bins}")
    return p


def _mel_range(config: FeatureConfig, p: dict[str, Any]) -> tuple[float, float]:
    # Kaldi: a high_freq <= 0 counts back from Nyquist.
    nyquist = config.sample_rate / 2.0
    high = float(p["high_freq"])
    return float(p["low_freq"]), high if high > 0.0 else nyquist + high


def fft_size(span: int, p: dict[str, Any]) -> int:
    """The FFT length: ``span`` zero-padded to the next power of two unless disabled."""
    return 1 << (span - 1).bit_length() if p["round_to_power_of_two"] else span


def kaldi_filters(
    config: FeatureConfig, p: dict[str, Any], n_fft: int, device: torch.device | str | None
) -> torch.Tensor:
    """Kaldi's mel filters (n_fft // 2, n_mels) float64: the Nyquist bin unused. Cached."""
    low, high = _mel_range(config, p)
    return mel_filters(
        config.sample_rate, n_fft, config.num_mel_bins, low, high, norm=None,
        mel_scale="htk", triangular_in_mel=True, device=device, dtype=torch.float64,
    )[: n_fft // 2]


def mfcc_params(config: FeatureConfig) -> dict[str, Any]:
    """The resolved mfcc params, ``num_ceps`` checked against the mel bins."""
    p = _resolve(config, MFCC_DEFAULTS)
    num_ceps = int(p["num_ceps"])
    if not 1 <= num_ceps <= config.num_mel_bins:
        raise ValueError(f"num_ceps must be in [1, num_mel_bins={config.num_mel_bins}], "
                         f"got {num_ceps}")
    return p


def fbank_params(config: FeatureConfig) -> dict[str, Any]:
    return _resolve(config, FBANK_DEFAULTS)


# -- the pipeline ------------------------------------------------------------------------------


def _log_mel_native(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig, p: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 1-4: -> (log-mel (B, T', n_mels), log energy (B, T'), frame counts (B,))."""
    if waveforms.dim() != 2:
        raise ValueError(f"waveforms must be (B, T), got shape {tuple(waveforms.shape)}")
    if lengths.shape != (waveforms.shape[0],):
        raise ValueError(
            f"lengths must be (B,) = ({waveforms.shape[0]},), got shape {tuple(lengths.shape)}"
        )
    span, hop = frame_geometry(config)
    n_fft = fft_size(span, p)
    device = waveforms.device
    lengths = lengths.to(device=device, dtype=torch.int64).clamp(0, waveforms.shape[1])
    waveforms, lengths = snip_input(waveforms, lengths, span, hop, bool(p["snip_edges"]))
    batch, total = waveforms.shape
    frame_lens = num_frames(lengths, span, hop)  # (B,)
    n_out = (total - span) // hop + 1 if total >= span else 0  # T'
    # (n_fft // 2, n_mels); built before the early return so bad ranges always raise
    filters = kaldi_filters(config, p, n_fft, device)
    if batch == 0 or n_out == 0:
        empty = waveforms.new_zeros((batch, n_out, config.num_mel_bins), dtype=torch.float32)
        return empty, empty[..., 0], frame_lens

    with torch.autocast(device_type=device.type, enabled=False):
        x = waveforms.to(torch.float32) * float(p["audio_scale"])
        frames = x.unfold(1, span, hop)[:, :n_out]  # (B, T', span), a view
        if p["dither"]:
            gen = torch.Generator(device=device).manual_seed(int(p["dither_seed"]))
            noise = torch.randn(frames.shape, generator=gen, device=device)
            frames = frames + float(p["dither"]) * noise
        if p["remove_dc_offset"]:
            frames = frames - frames.mean(dim=-1, keepdim=True)
        log_energy = frames.square().sum(dim=-1)  # (B, T')
        coeff = float(p["preemph_coeff"])
        if coeff != 0.0:
            previous = torch.cat([frames[..., :1], frames[..., :-1]], dim=-1)
            frames = frames - coeff * previous
        window = _window(p["window_type"], span, float(p["blackman_coeff"]), device)
        frames = frames * window
        if not p["raw_energy"]:
            log_energy = frames.square().sum(dim=-1)
        log_energy = log_energy.clamp_min(FLT_EPSILON).log()
        if float(p["energy_floor"]) > 0.0:
            log_energy = log_energy.clamp_min(math.log(float(p["energy_floor"])))

        # The spectrum runs in float64: float32 FFT rounding is relative to a frame's loudest
        # bin, and after preemphasis the quietest bins sit ~1e-11 below it, where it reaches
        # 1e-2 in log; float64 costs little here (no TF32 either).
        spec = torch.fft.rfft(frames.double(), n=n_fft)[..., : n_fft // 2]  # (B, T', n_bins)
        power = spec.real.square() + spec.imag.square()
        if not p.get("use_power", True):
            power = power.sqrt()
        mel = (power @ filters).float()  # (B, T', n_mels)
        if p.get("use_log_fbank", True):
            mel = mel.clamp_min(FLT_EPSILON).log()
    return mel, log_energy, frame_lens


def _mask(feats: torch.Tensor, frame_lens: torch.Tensor) -> torch.Tensor:
    valid = torch.arange(feats.shape[1], device=feats.device) < frame_lens[:, None]
    return torch.where(valid[..., None], feats, torch.zeros((), device=feats.device))


def fbank(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) float waveforms with valid ``lengths`` (B,) -> ((B, T', F) fp32, (B,) int64).

    F = num_mel_bins, plus one leading log-energy column with ``use_energy``.
    """
    kernel = _FBANK.select(waveforms, config)
    if kernel is not None:
        return kernel(waveforms, lengths, config)
    return fbank_native(waveforms, lengths, config)


def fbank_native(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fbank`` in torch ops, on the input's device: the CPU path and the kernels' oracle."""
    p = fbank_params(config)
    mel, log_energy, frame_lens = _log_mel_native(waveforms, lengths, config, p)
    feats = torch.cat([log_energy[..., None], mel], dim=-1) if p["use_energy"] else mel
    return _mask(feats, frame_lens), frame_lens


def mfcc(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) float waveforms with valid ``lengths`` (B,) -> ((B, T', num_ceps) fp32, (B,) int64).

    With ``use_energy`` (Kaldi's default) column 0 is the raw log energy instead of C0.
    """
    kernel = _MFCC.select(waveforms, config)
    if kernel is not None:
        return kernel(waveforms, lengths, config)
    return mfcc_native(waveforms, lengths, config)


def mfcc_native(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: FeatureConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mfcc`` in torch ops, on the input's device: the CPU path and the kernels' oracle."""
    p = mfcc_params(config)
    mel, log_energy, frame_lens = _log_mel_native(waveforms, lengths, config, p)
    return cepstra(mel, log_energy, frame_lens, config, p), frame_lens


def cepstra(
    mel: torch.Tensor, log_energy: torch.Tensor, frame_lens: torch.Tensor,
    config: FeatureConfig, p: dict[str, Any],
) -> torch.Tensor:
    """Step 5: log-mel (B, T', n_mels) and log energy (B, T') -> masked MFCCs (B, T', num_ceps)."""
    num_ceps = int(p["num_ceps"])
    dct = _cepstral_matrix(
        num_ceps, config.num_mel_bins, float(p["cepstral_lifter"]), mel.device, torch.float64
    )
    ceps = (mel.double() @ dct).float()  # (B, T', num_ceps)
    if p["use_energy"]:
        ceps = torch.cat([log_energy[..., None], ceps[..., 1:]], dim=-1)
    return _mask(ceps, frame_lens)


def default_framing() -> StreamingFraming:
    # The spec's grid for FeatureConfig's defaults; other rates and frame sizes take theirs from
    # kaldi_framing(config). Read off the fields: no FeatureConfig exists before registration.
    d = {f.name: f.default for f in dataclasses.fields(FeatureConfig)}
    rate = d["sample_rate"]
    return _framing(
        _kaldi_samples(rate, d["frame_length_ms"]), _kaldi_samples(rate, d["frame_shift_ms"])
    )

