"""The speech-detector axis: ``register_vad`` / ``build_detector``.

A detector declares what it consumes (a waveform, or a tensor the ASR produced) and the roles
it can play; the registry refuses a spec that claims to pre-segment audio from an ASR-derived
signal, at registration rather than at the first request. A detector that is a model of its own
(``needs_weights``) and finds no weights fails at construction, naming the package or flag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oasr.registry import Registry
from oasr.vad.spec import (
    VAD_MODES,
    MissingWeightsError,
    SpeechDetector,
    SpeechProbs,
    VadConsumes,
    VadFraming,
    VadSpec,
)

VADS: Registry[VadSpec] = Registry("speech detector", entry_point_group="oasr.vads")

# Built-in detectors, imported on first use.
VADS.register("silero", "oasr.vad.silero:SILERO_SPEC")
VADS.register("fsmn", "oasr.vad.fsmn:FSMN_SPEC")
VADS.register("ctc_blank", "oasr.vad.ctc_blank:CTC_BLANK_SPEC")
VADS.register("energy", "oasr.vad.energy:ENERGY_SPEC")


def register_vad(spec: VadSpec) -> VadSpec:
    if not isinstance(spec, VadSpec):
        raise TypeError(f"register_vad takes a VadSpec, got {type(spec).__name__}")
    VADS.register(spec.name, spec)
    return spec


def build_detector(name: str, mode: str | None = None, model_dir: str | Path | None = None,
                   **kwargs: Any) -> SpeechDetector:
    """Build the detector registered as ``name`` for the role ``mode`` (one of ``VAD_MODES``).

    Raises:
        ValueError: the detector does not declare ``mode``.
        MissingWeightsError: it needs weights and neither ``model_dir`` nor its weight package
            provides them.
    """
    spec = VADS.get(name)
    if mode is not None and mode not in spec.modes:
        raise ValueError(f"speech detector {name!r} cannot serve mode {mode!r}; it declares "
                         f"{list(spec.modes)}")
    if spec.needs_weights:
        weights = spec.detector_cls.find_weights(model_dir)
        if weights is None:
            where = f"no weights in {model_dir}" if model_dir else "no weights found"
            raise MissingWeightsError(
                f"speech detector {name!r} is a trained model and {where}; "
                f"{spec.weights_hint or 'pass --vad-model-dir'}")
        kwargs["weights"] = weights
    return spec.detector_cls(**kwargs)


__all__ = ["VADS", "VAD_MODES", "MissingWeightsError", "SpeechDetector", "SpeechProbs",
           "VadConsumes", "VadFraming", "VadSpec", "build_detector", "register_vad"]
