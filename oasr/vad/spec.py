"""What a speech detector is: ``SpeechDetector`` (the model) and ``VadSpec`` (its declaration).

A detector turns a signal into a per-frame speech probability on a fixed grid; everything
after that (segments, endpoints) is shared policy in ``oasr.vad.segmenter`` and
``oasr.vad.endpointer``, so two detectors with the same probabilities give the same segments
and the same endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

VadConsumes = Literal["waveform", "log_probs", "hidden"]
VAD_MODES = ("presegment", "stream", "posthoc")


@dataclass(frozen=True)
class VadFraming:
    """A detector's window: per sample rate it serves, the samples one probability covers (the
    hop) and the samples of left context each window also reads. A detector on the encoder's
    grid has none."""

    frame_samples: dict[int, int]
    context_samples: dict[int, int]

    @property
    def sample_rates(self) -> tuple[int, ...]:
        return tuple(sorted(self.frame_samples))

    def frame_seconds(self, sample_rate: int) -> float:
        return self.frame_samples[sample_rate] / sample_rate


@dataclass
class SpeechProbs:
    """Per-frame speech probabilities. probs: (B, N) float32, frames past ``lengths[b]`` are 0;
    frame ``i`` covers ``[i * frame_s, (i + 1) * frame_s)`` seconds of row ``b``."""

    probs: torch.Tensor
    lengths: torch.Tensor
    frame_s: float

    def row(self, b: int) -> torch.Tensor:
        """(N_b,) float32 on the CPU."""
        return self.probs[b, : int(self.lengths[b])].float().cpu()


class SpeechDetector:
    """Base detector: ``detect(waveforms, lengths, sample_rate)`` for ``consumes="waveform"``,
    ``detect_from_asr(tensor, lengths, seconds_per_frame)`` for an ASR-derived signal.

    A waveform detector with the ``stream`` role serves chunks through ``detect_streaming``; a
    ``stateful`` one also has ``init_state(batch)`` and the batching pair ``stack_states`` /
    ``unstack_states`` (per-stream states <-> one batched state), which is what lets many
    streams share one call (``oasr.vad.stream.StreamingVadPool``).
    """

    stateful: bool = False
    # The probability the segmenter and endpointer use unless told otherwise.
    default_threshold: float = 0.5

    def detect(self, waveforms: torch.Tensor, lengths: torch.Tensor,
               sample_rate: int) -> SpeechProbs:
        raise NotImplementedError(f"{type(self).__name__} does not read waveforms")

    def detect_from_asr(self, tensor: torch.Tensor, lengths: torch.Tensor,
                        seconds_per_frame: float) -> SpeechProbs:
        raise NotImplementedError(f"{type(self).__name__} does not read an ASR signal")

    def init_state(self, batch: int, sample_rate: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} is not stateful")

    def detect_streaming(self, chunk: torch.Tensor, state: Any, sample_rate: int,
                         frames: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        """chunk (B, k * frame) -> probs (B, k) and the state after it. ``frames`` (B,): row
        ``b`` holds only its first ``frames[b]`` frames (the rest is padding): its state is the
        one after them and its probabilities past them are undefined; ``None``: all k."""
        raise NotImplementedError(f"{type(self).__name__} does not read chunks")

    def stack_states(self, states: list[Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} is not stateful")

    def unstack_states(self, state: Any) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__} is not stateful")


@dataclass(frozen=True)
class VadSpec:
    """A detector's declaration.

    ``consumes`` picks the entry point; ``modes`` the roles it may play; ``min_silence_floor_ms``
    the shortest silence its signal can tell from its own sparsity (the segmenter never uses a
    shorter one); ``needs_weights`` makes a detector with no weights fail at construction, naming
    ``weights_hint``; ``framing`` is its trained window (None: the encoder's grid).
    """

    name: str
    detector_cls: Any
    consumes: VadConsumes = "waveform"
    modes: tuple[str, ...] = ("presegment",)
    min_silence_floor_ms: float = 0.0
    needs_weights: bool = False
    framing: VadFraming | None = None
    stateful: bool = False
    weights_hint: str = ""

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in VAD_MODES]
        if bad:
            raise ValueError(f"VadSpec {self.name!r}: unknown modes {bad}; valid: {VAD_MODES}")
        if "presegment" in self.modes and self.consumes != "waveform":
            raise ValueError(
                f"VadSpec {self.name!r} consumes {self.consumes!r}, an ASR-derived signal, so it "
                "cannot pre-segment audio the ASR has not seen; drop 'presegment' from its modes"
            )
        if self.stateful and "stream" not in self.modes:
            raise ValueError(f"VadSpec {self.name!r} is stateful but does not declare 'stream'")


class MissingWeightsError(ValueError):
    """A detector that is a model of its own was built with no weights to load."""
