"""``apply_quantization(model, spec, device)``: select, smooth, quantize, attach. In place.

The engine calls it once the model is on its device and dtype (``ASREngine``, from
``EngineConfig.quantization`` or the checkpoint's recorded spec). A model is quantized once:
asking again for the same scheme returns the first report; asking for another raises (load the
model again), so a loaded model shared by several engines cannot change under one of them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.quantization import QUANT_ALGORITHMS, QUANT_METHODS
from oasr.quantization.selection import select_layers
from oasr.quantization.spec import QuantizationSpec, parse_quantization

__all__ = ["QuantizationReport", "apply_quantization", "model_bytes", "quantization_of"]

logger = logging.getLogger(__name__)
_ATTR = "_oasr_quantization"


@dataclass
class QuantizationReport:
    """What a quantization did: the spec (its ``layers`` filled), the lane, the layers served
    and those kept in full precision (path -> why), and the model's resident tensor bytes
    before and after (parameters and buffers, each storage once; a lane's derived copy, such
    as fbgemm's prepacked weights, is not counted)."""

    spec: QuantizationSpec
    lane: str
    quantized: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    smoothed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    def summary(self) -> str:
        kept = ", ".join(f"{p} ({why})" for p, why in list(self.kept.items())[:3])
        more = f", +{len(self.kept) - 3} more" if len(self.kept) > 3 else ""
        return (f"quantization {self.spec.method} on {self.lane} ({self.spec.algorithm}, "
                f"{self.smoothed} smoothed): {len(self.quantized)} layers quantized, "
                f"{len(self.kept)} kept" + (f": {kept}{more}" if kept else "")
                + f"; model tensors {self.bytes_before / 2**20:.1f} MiB -> "
                f"{self.bytes_after / 2**20:.1f} MiB")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["spec"] = self.spec.to_dict()
        return out


def model_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, each storage counted once."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or t.device.type == "meta":
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def quantization_of(model: Any) -> QuantizationReport | None:
    """The report of the quantization applied to ``model``; None when it is float."""
    return getattr(model, _ATTR, None)


def _device_of(model: Any) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def apply_quantization(model: Any, spec: QuantizationSpec | str | None, device: Any = None,
                       stats: Any | None = None,
                       smoothing: dict[str, torch.Tensor] | None = None,
                       offline: bool = False) -> QuantizationReport | None:
    """Quantize ``model``'s selected layers in place; None (and nothing done) for no spec.

    Args:
        spec: a spec, a method name (``int8``, ``int8-weight``, ``fp8``) or ``none``.
        device: where the model runs (default: where its parameters are); a method with no
            lane for it raises ``QuantizationUnavailable`` before any layer changes.
        stats: calibration statistics (``calibration.ActivationStats``) for ``smoothquant``.
        smoothing: per-layer smoothing factors already computed (a pre-quantized checkpoint's);
            they replace the algorithm's.
        offline: quantize the weights for a checkpoint only (``oasr convert --quantize``): no
            lane runs, so a method may be prepared on a device it cannot serve.

    Raises:
        ValueError: the model is already quantized otherwise; the selection is empty; the
            algorithm lacks what it needs.
    """
    parsed = parse_quantization(spec)
    if parsed is None:
        return None
    existing = quantization_of(model)
    if existing is not None:
        if existing.spec.same_scheme(parsed):
            return existing
        raise ValueError(f"this model object is already quantized ({existing.spec}); load it "
                         f"again to run it as {parsed}")
    device = torch.device(device) if device is not None else _device_of(model)
    method = QUANT_METHODS.get(parsed.method)(parsed, device, offline=offline)
    selection = select_layers(model, parsed, method, device)
    if smoothing is None:
        algorithm = QUANT_ALGORITHMS.get(parsed.algorithm)()
        smoothing = algorithm.smoothing(model, selection.chosen, parsed, stats)
    before = model_bytes(model)
    with torch.no_grad():
        for path, layer in selection.chosen.items():
            weight = layer.weight.detach()
            factor = smoothing.get(path)
            if factor is not None:
                factor = factor.to(device=weight.device, dtype=torch.float32)
                weight = weight.float() * factor[None, :]
                layer.register_buffer("input_smooth", (1.0 / factor).to(layer.weight.dtype))
            method.create_weights(layer, weight)
            layer.quant_method = method
    applied = dataclasses.replace(parsed, lane=method.lane_name,
                                  layers=tuple(selection.chosen))
    report = QuantizationReport(
        spec=applied, lane=method.lane_name, quantized=list(selection.chosen),
        kept=selection.kept, smoothed=sum(1 for p in selection.chosen if p in smoothing),
        bytes_before=before, bytes_after=model_bytes(model))
    setattr(model, _ATTR, report)
    logger.info("%s", report.summary())
    return report
