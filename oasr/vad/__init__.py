"""The speech-detector axis: ``register_vad`` / ``build_detector``.

A detector declares what it consumes (a waveform, or a tensor the ASR produced) and the roles
it can play; the registry refuses a spec that claims to pre-segment audio from an ASR-derived
signal, at registration rather than at the first request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from oasr.registry import Registry

VadConsumes = Literal["waveform", "log_probs", "hidden"]
VAD_MODES = ("presegment", "stream", "posthoc")


class SpeechDetector:
    """Base detector: ``detect(waveform)`` or ``detect_from_asr(tensor)`` per ``consumes``."""

    stateful: bool = False

    def detect(self, waveform: Any, sample_rate: int) -> Any:
        raise NotImplementedError

    def detect_from_asr(self, tensor: Any, seconds_per_frame: float) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class VadSpec:
    name: str
    detector_cls: Any
    consumes: VadConsumes = "waveform"
    modes: tuple[str, ...] = ("presegment",)
    min_silence_floor_ms: float = 0.0
    needs_weights: bool = False

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in VAD_MODES]
        if bad:
            raise ValueError(f"VadSpec {self.name!r}: unknown modes {bad}; valid: {VAD_MODES}")
        if "presegment" in self.modes and self.consumes != "waveform":
            raise ValueError(
                f"VadSpec {self.name!r} consumes {self.consumes!r}, an ASR-derived signal, so it "
                "cannot pre-segment audio the ASR has not seen; drop 'presegment' from its modes"
            )


VADS: Registry[VadSpec] = Registry("speech detector", entry_point_group="oasr.vads")


def register_vad(spec: VadSpec) -> VadSpec:
    VADS.register(spec.name, spec)
    return spec


def build_detector(name: str, **kwargs: Any) -> SpeechDetector:
    return VADS.get(name).detector_cls(**kwargs)


__all__ = ["SpeechDetector", "VadSpec", "VADS", "register_vad", "build_detector"]
