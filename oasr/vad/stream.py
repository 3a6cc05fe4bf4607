"""Many streams sharing one speech detector: one batched detector call per step.

The pool holds each stream's opaque detector state. ``probabilities`` takes the new whole frames
of any number of streams (each its own count), stacks their states with the detector's
``stack_states``, runs ``detect_streaming`` once for the cohort (rows padded to the longest,
each row's frame count passed so its state stops after its own frames), and splits the states
back with ``unstack_states``. A stateless detector (``energy``) has no state to carry: the same
call, without the stacking. What the probabilities mean (endpoints) is the endpointer's
(``oasr.vad.endpointer``), one per stream, outside the pool.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import torch

from oasr.vad.spec import SpeechDetector, VadSpec


def stream_detector_names() -> list[str]:
    """The registered detectors that can endpoint a stream from its audio."""
    from oasr.vad import VADS

    return [n for n in VADS.names() if _streams_audio(VADS.get(n))]


def _streams_audio(spec: VadSpec) -> bool:
    return spec.consumes == "waveform" and "stream" in spec.modes and spec.framing is not None


class StreamingVadPool:
    """One detector at one sample rate, the states of the streams opened on it."""

    def __init__(self, detector: SpeechDetector, spec: VadSpec, sample_rate: int) -> None:
        if not _streams_audio(spec):
            raise ValueError(f"speech detector {spec.name!r} cannot endpoint a stream from its "
                             f"audio (it reads {spec.consumes!r}, roles {list(spec.modes)})")
        if sample_rate not in spec.framing.frame_samples:
            raise ValueError(f"speech detector {spec.name!r} has no framing at {sample_rate} Hz "
                             f"(it serves {list(spec.framing.sample_rates)})")
        self.detector = detector
        self.spec = spec
        self.sample_rate = sample_rate
        self.frame_samples = spec.framing.frame_samples[sample_rate]
        self.states: dict[Hashable, Any] = {}

    @property
    def frame_s(self) -> float:
        return self.frame_samples / self.sample_rate

    def open(self, key: Hashable) -> None:
        if key in self.states:
            raise ValueError(f"stream {key!r} is already open on the {self.spec.name} detector")
        self.states[key] = (self.detector.init_state(1, self.sample_rate) if self.spec.stateful
                            else None)

    def close(self, key: Hashable) -> None:
        self.states.pop(key, None)

    def probabilities(self, chunks: dict[Hashable, np.ndarray | torch.Tensor]
                      ) -> dict[Hashable, np.ndarray]:
        """key -> (n_k * frame_samples,) new samples of that open stream -> key -> (n_k,) float64
        speech probabilities; one detector call for all of them, each stream's state kept."""
        keys = [k for k in chunks if len(chunks[k])]
        if not keys:
            return {k: np.zeros(0) for k in chunks}
        fs = self.frame_samples
        rows = [torch.as_tensor(np.ascontiguousarray(chunks[k], dtype=np.float32)).reshape(-1)
                for k in keys]
        counts = [len(r) // fs for r in rows]
        if any(len(r) != n * fs for r, n in zip(rows, counts)):
            raise ValueError(f"a detector chunk is a whole number of {fs}-sample frames")
        batch, frames = _batch(rows, counts, fs)
        state = (self.detector.stack_states([self.states[k] for k in keys])
                 if self.spec.stateful else None)
        probs, state = self.detector.detect_streaming(batch, state, self.sample_rate,
                                                      frames=frames)
        if self.spec.stateful:
            for k, st in zip(keys, self.detector.unstack_states(state), strict=True):
                self.states[k] = st
        probs = probs.detach().cpu().numpy().astype(np.float64)
        out = {k: np.zeros(0) for k in chunks}
        for i, (k, n) in enumerate(zip(keys, counts)):
            out[k] = probs[i, :n]
        return out


def _batch(rows: list[torch.Tensor], counts: list[int],
           frame_samples: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows of whole frames -> (B, longest) and, when they differ, each row's frame count
    (the detector stops a row's state there)."""
    longest = max(counts)
    if min(counts) == longest:
        return torch.stack(rows), None
    batch = torch.zeros(len(rows), longest * frame_samples)
    for i, r in enumerate(rows):
        batch[i, :len(r)] = r
    return batch, torch.tensor(counts, dtype=torch.long)
