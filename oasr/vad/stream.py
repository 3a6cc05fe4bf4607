"""A pool of streams sharing one stateful detector: one batched detector call per step.

The pool holds each stream's opaque detector state and its ``Endpointer``. ``step`` takes one
chunk per stream in the cohort (equal lengths, a whole number of the detector's frames), stacks
their states with the detector's ``stack_states``, runs ``detect_streaming`` once for the whole
cohort, splits the states back with ``unstack_states`` and feeds each stream's probabilities to
its endpointer. This is the streaming stage's use of the speech-detector axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.vad.endpointer import EndpointConfig, Endpointer, EndpointEvent
from oasr.vad.spec import SpeechDetector, VadSpec


@dataclass
class _Stream:
    state: Any
    endpointer: Endpointer
    probs: list[torch.Tensor] = field(default_factory=list)


class StreamingVadPool:
    def __init__(self, detector: SpeechDetector, spec: VadSpec, sample_rate: int,
                 config: EndpointConfig | None = None) -> None:
        if not (spec.stateful and "stream" in spec.modes):
            raise ValueError(f"speech detector {spec.name!r} is not a stateful stream detector")
        if spec.framing is None or sample_rate not in spec.framing.frame_samples:
            raise ValueError(f"speech detector {spec.name!r} has no framing at {sample_rate} Hz")
        self.detector = detector
        self.spec = spec
        self.sample_rate = sample_rate
        self.frame_samples = spec.framing.frame_samples[sample_rate]
        self.config = config or EndpointConfig(threshold=detector.default_threshold)
        self.streams: dict[str, _Stream] = {}

    def open(self, stream_id: str) -> None:
        if stream_id in self.streams:
            raise ValueError(f"stream {stream_id!r} is already open")
        self.streams[stream_id] = _Stream(
            self.detector.init_state(1, self.sample_rate),
            Endpointer(self.frame_samples / self.sample_rate, self.config,
                       self.spec.min_silence_floor_ms))

    def close(self, stream_id: str) -> None:
        del self.streams[stream_id]

    def probabilities(self, chunks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """chunks: stream id -> (n,) samples, one length for the cohort -> per stream the (F,)
        speech probability of each detector frame; one batched detector call, states kept."""
        ids = list(chunks)
        if not ids:
            return {}
        batch = torch.stack([chunks[i] for i in ids])
        state = self.detector.stack_states([self.streams[i].state for i in ids])
        probs, state = self.detector.detect_streaming(batch, state, self.sample_rate)
        out = {}
        for i, sid, st in zip(range(len(ids)), ids, self.detector.unstack_states(state)):
            self.streams[sid].state = st
            out[sid] = probs[i].float().cpu()
        return out

    def step(self, chunks: dict[str, torch.Tensor]) -> dict[str, list[EndpointEvent]]:
        """chunks: stream id -> (n,) samples, one length for the cohort -> events per stream."""
        events = {}
        for sid, p in self.probabilities(chunks).items():
            stream = self.streams[sid]
            stream.probs.append(p)
            events[sid] = stream.endpointer.feed(p.numpy())
        return events
