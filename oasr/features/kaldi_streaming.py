"""Kaldi ``fbank`` / ``mfcc`` chunk by chunk: ``(audio, state) -> (features, state)`` plus a flush
at the input's end; concatenated, the outputs equal the offline features of the whole audio.

With ``snip_edges`` (Kaldi's default) every frame lies inside the signal, so the generic
``oasr.features.streaming.stream_frames`` serves it and nothing is left at the end (offline
drops the last partial frame too).

Without ``snip_edges`` (lhotse, kaldifeat, icefall) frame k reads stream samples
``[k * hop - o, k * hop - o + span)`` with ``o = span // 2 - hop // 2``, reflected at both ends,
and a row of ``n`` samples has ``(n + hop // 2) // hop`` frames. As Kaldi's online extractor
does, a frame comes out once its window is whole: the reflected head (``o`` samples) is known
once frame 0 is, and the frames that read past the end come out of ``kaldi_flush`` when the
input ends, with the tail reflected then. The kept samples always cover what that reflection
reads (at least ``span - hop`` of them, more than the tail's ``span - hop // 2 - o``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from oasr.features.kaldi import (
    centred_num_frames,
    centred_offset,
    fbank,
    fbank_params,
    frame_geometry,
    kaldi_framing,
    mfcc,
    mfcc_params,
)
from oasr.features.spec import FeatureConfig
from oasr.features.streaming import stream_frames

__all__ = ["CentredFramingState", "kaldi_flush", "kaldi_streaming"]


@dataclass
class CentredFramingState:
    """One stream without snip_edges.

    pending: (P,) float32 samples from the next unconsumed frame's first one on (the reflected
        head included once ``started``), raw samples from sample 0 before that.
    started: the reflected head is in place.
    frames / samples: frames emitted and samples accepted so far.
    """

    pending: torch.Tensor
    started: bool = False
    frames: int = 0
    samples: int = 0


def _params(config: FeatureConfig) -> dict[str, Any]:
    p = fbank_params(config) if config.feature_type == "fbank" else mfcc_params(config)
    if float(p["dither"]):
        raise ValueError(
            "dither draws its noise per offline call, so streamed features cannot equal offline "
            "ones; set params['dither'] = 0.0 to stream"
        )
    return p


def _fn(config: FeatureConfig) -> Any:
    return fbank if config.feature_type == "fbank" else mfcc


def _whole_frames(samples: torch.Tensor, config: FeatureConfig) -> torch.Tensor:
    """Every whole frame of ``samples`` taken from its sample 0 (snip_edges framing)."""
    snip = dataclasses.replace(config, params={**config.params, "snip_edges": True})
    span, _ = frame_geometry(config)
    if samples.shape[0] < span:
        return _empty(config, samples.device)
    feats, lens = _fn(config)(samples[None], torch.tensor([samples.shape[0]]), snip)
    return feats[0, : int(lens[0])]


def _empty(config: FeatureConfig, device: torch.device | str | None = None) -> torch.Tensor:
    span, _ = frame_geometry(config)
    feats, _ = _fn(config)(torch.zeros(1, span, device=device),
                           torch.zeros(1, dtype=torch.int64), config)
    return feats[0, :0]


def kaldi_streaming(audio: torch.Tensor, state: Any, config: FeatureConfig
                    ) -> tuple[torch.Tensor, Any]:
    """(T,) samples and the state (None to start) -> the frames whose window is whole (T', F)
    fp32 and the next state."""
    p = _params(config)
    if p["snip_edges"]:
        return stream_frames(_fn(config), kaldi_framing(config), config, audio, state)
    if audio.dim() != 1:
        raise ValueError(f"audio must be (T,), got shape {tuple(audio.shape)}")
    span, hop = frame_geometry(config)
    offset = centred_offset(span, hop)
    if state is None:
        state = CentredFramingState(audio.new_zeros(0, dtype=torch.float32))
    buf = torch.cat([state.pending.to(audio.device), audio.to(torch.float32)])
    samples = state.samples + int(audio.shape[0])
    if not state.started:
        if samples < span - offset:  # frame 0 not whole yet; nothing emitted, buf is raw
            return _empty(config, buf.device), CentredFramingState(buf, False, 0, samples)
        # Frame 0 reads the first ``offset`` samples mirrored (samples >= span - offset >=
        # offset, so a single reflection, as Kaldi's, covers it).
        buf = torch.cat([buf[:offset].flip(0), buf])
    feats = _whole_frames(buf, config)
    n = feats.shape[0]
    return feats, CentredFramingState(buf[n * hop:].clone(), True, state.frames + n, samples)


def kaldi_flush(state: Any, config: FeatureConfig) -> torch.Tensor:
    """The input ended: the frames still held (T', F) fp32; none with snip_edges."""
    p = _params(config)
    if state is None or p["snip_edges"]:
        return _empty(config)
    if not isinstance(state, CentredFramingState):
        raise TypeError(f"kaldi_flush needs a CentredFramingState, got {type(state).__name__}")
    span, hop = frame_geometry(config)
    total = int(centred_num_frames(torch.tensor(state.samples), hop))
    left = total - state.frames
    if left <= 0:
        return _empty(config, state.pending.device)
    if not state.started:  # nothing came out: the whole input is held, offline does the rest
        feats, lens = _fn(config)(state.pending[None], torch.tensor([state.samples]), config)
        return feats[0, : int(lens[0])]
    buf = state.pending
    need = (left - 1) * hop + span - buf.shape[0]
    if need > buf.shape[0]:
        raise AssertionError(f"kaldi_flush: the reflected tail needs {need} samples, "
                             f"{buf.shape[0]} are kept")
    feats = _whole_frames(torch.cat([buf, buf.flip(0)[:max(need, 0)]]), config)
    return feats[:left]
