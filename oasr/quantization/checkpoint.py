"""Pre-quantized checkpoints (native bundle format v2) and the engine's choice of spec.

``oasr convert --quantize`` writes a bundle whose ``quantization`` records the applied spec
(its ``layers`` listed) and whose state dict holds, for each of those layers,
``<path>.qweight`` / ``<path>.weight_scale`` (and ``<path>.input_smooth`` when smoothed) instead
of ``<path>.weight``. Loading reconstructs the float weights from them (``dequantize_state``):
the float model loads as any other, moves to its device and dtype, and the engine re-applies
the recorded spec with the recorded smoothing, which reproduces the stored int8 / e4m3 values
exactly (a row's largest value is its scale times the format's maximum, so the scales come
back to within float rounding and every value rounds back to itself). No calibration runs
at start-up.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.quantization.numerics import dequantize_weight
from oasr.quantization.spec import QuantizationSpec, parse_quantization

__all__ = ["RecordedQuantization", "dequantize_state", "engine_quantization",
           "quantized_state_dict"]

logger = logging.getLogger(__name__)
QUANT_KEYS = ("qweight", "weight_scale", "input_smooth")


@dataclass
class RecordedQuantization:
    """A checkpoint's quantization: the spec it recorded and its smoothing factors."""

    spec: QuantizationSpec
    smoothing: dict[str, torch.Tensor] = field(default_factory=dict)


def quantized_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """``model``'s state dict as a v2 bundle stores it (a quantized layer's float weight is
    already gone; its ``qweight`` / ``weight_scale`` / ``input_smooth`` are buffers)."""
    return {k: v.detach() for k, v in model.state_dict().items()}


def dequantize_state(state: dict[str, torch.Tensor], recorded: dict[str, Any],
                     float_keys: set[str]) -> tuple[dict[str, torch.Tensor], RecordedQuantization]:
    """A v2 bundle's state -> the float state the model loads, and what it recorded.

    Args:
        recorded: the bundle's ``quantization`` (a ``QuantizationSpec`` dict).
        float_keys: the float model's state-dict keys (a tied layer has no weight key of its
            own: its float weight is the tied module's, loaded as is).

    Raises:
        ValueError: the record lists no layers, or a listed layer's tensors are missing.
    """
    spec = QuantizationSpec.from_dict(recorded)
    if not spec.layers:
        raise ValueError("the bundle's quantization lists no layers; convert it again")
    out = dict(state)
    smoothing: dict[str, torch.Tensor] = {}
    for path in spec.layers:
        try:
            q = out.pop(f"{path}.qweight")
            scale = out.pop(f"{path}.weight_scale")
        except KeyError:
            raise ValueError(f"the bundle records {path} as quantized but holds no "
                             f"{path}.qweight / {path}.weight_scale; convert it again") from None
        smooth = out.pop(f"{path}.input_smooth", None)
        weight = dequantize_weight(q, scale)  # the smoothed weight
        if smooth is not None:
            smoothing[path] = 1.0 / smooth.float()
            weight = weight * smooth.float()[None, :]
        if f"{path}.weight" in float_keys:
            out[f"{path}.weight"] = weight
    return out, RecordedQuantization(spec=spec, smoothing=smoothing)


def engine_quantization(requested: Any, recorded: RecordedQuantization | None
                        ) -> tuple[QuantizationSpec | None, dict[str, torch.Tensor] | None]:
    """The spec an engine applies and its smoothing: the checkpoint's, else the request's.

    ``requested`` is ``EngineConfig.quantization``: None follows the checkpoint; ``"none"``
    runs a pre-quantized checkpoint's weights dequantized, in float.

    Raises:
        ValueError: the request names another method than the checkpoint's.
    """
    spec = parse_quantization(requested)
    if recorded is None:
        return spec, None
    if isinstance(requested, str) and spec is None:
        logger.info("quantization none: running the checkpoint's %s weights dequantized",
                    recorded.spec.method)
        return None, None
    if spec is not None and spec.method != recorded.spec.method:
        raise ValueError(f"the checkpoint is quantized {recorded.spec.method}; --quantization "
                         f"{spec.method} cannot re-quantize it: convert the float checkpoint "
                         f"with --quantize {spec.method}, or pass --quantization none")
    # The weights are lane-independent: the lane is chosen again for this device.
    lane = spec.lane if spec is not None else None
    return dataclasses.replace(recorded.spec, lane=lane), recorded.smoothing
