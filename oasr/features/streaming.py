"""Chunk-by-chunk features for frontends whose frames are independent: ``(audio, state) ->
(features, state)``, the lhotse ``OnlineFeatureExtractor`` shape.

A frontend with a ``StreamingFraming`` grid reads ``span`` samples per frame, one frame every
``hop`` samples, and normalizes nothing across frames, so a stream that keeps its samples from
the next unconsumed frame on (``FramingState.pending``) and runs the offline function over
``pending + chunk`` emits exactly the offline frames of the whole audio, in order. A chunk may be
any size, including empty or a single sample (then it usually yields no frame and only grows
``pending``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from oasr.features.spec import FeatureConfig, StreamingFraming


@dataclass
class FramingState:
    """One stream's feature state.

    pending: (P,) float32 samples from the next unconsumed frame's first sample on; P < span
        once at least one frame came out, so it never exceeds ``history + hop - 1``.
    frames: frames emitted so far (frame ``k`` starts at sample ``k * hop`` of the stream).
    samples: samples accepted so far.
    """

    pending: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    frames: int = 0
    samples: int = 0


def stream_frames(
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    framing: StreamingFraming,
    config: FeatureConfig,
    audio: torch.Tensor,
    state: FramingState | None,
) -> tuple[torch.Tensor, FramingState]:
    """Run the batch function ``fn`` over ``state.pending + audio`` and keep the tail.

    audio: (T,) samples at ``config.sample_rate``. -> features (T', F) fp32 (T' >= 0) and the
    next state. ``fn`` is the frontend's offline ``(B, T), (B,), config -> (B, T', F), (B,)``.
    """
    if framing.prefill:
        raise ValueError(
            f"{config.feature_type}: a framing with prefill={framing.prefill} pads before frame "
            "0; stream_frames serves snip_edges grids (prefill=0) only"
        )
    if audio.dim() != 1:
        raise ValueError(f"audio must be (T,), got shape {tuple(audio.shape)}")
    state = state or FramingState(pending=audio.new_zeros(0, dtype=torch.float32))
    buf = torch.cat([state.pending.to(audio.device), audio.to(torch.float32)])
    samples = state.samples + int(audio.shape[0])
    if buf.shape[0] < framing.span:
        feats, _ = fn(buf.new_zeros(1, framing.span), torch.zeros(1, dtype=torch.int64), config)
        return feats[0, :0], FramingState(buf, state.frames, samples)
    feats, lens = fn(buf[None], torch.tensor([buf.shape[0]], device=buf.device), config)
    n = int(lens[0])
    return feats[0, :n], FramingState(buf[n * framing.hop:].clone(), state.frames + n, samples)


def flush_frames(state: FramingState) -> FramingState:
    """End of stream: snip_edges drops the samples after the last whole frame, like offline."""
    return FramingState(state.pending[:0], state.frames, state.samples)
