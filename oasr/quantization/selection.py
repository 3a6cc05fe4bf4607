"""Per-layer selection by module path: which quantizable layers a spec's method serves.

A layer is selected when its kind is in ``spec.module_types``, a pattern of ``spec.include``
matches its path (``fnmatch``: ``*`` crosses dots), no pattern of the exclusions does, and the
method's lane can serve its shape. Every layer left in full precision is reported with why.

``DEFAULT_KEEP`` (the exclusions when a spec gives none) keeps the layers whose output is read
as a distribution over tokens or durations: output heads (Whisper's ``proj_out``, LM heads,
attention decoders' ``output_layer``), CTC projections, and the transducers' joint and
predictor, whose weights the fused transducer decode also reads directly. Measured on Whisper
tiny.en: docs/quantization.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from oasr.layers.quantizable import QuantizableConv, QuantizableGemm
from oasr.quantization.spec import QuantizationSpec

__all__ = ["DEFAULT_KEEP", "Selection", "select_layers"]

DEFAULT_KEEP: tuple[str, ...] = (
    "*proj_out", "*lm_head", "*output_layer",
    "ctc", "ctc.*", "ctc_head",
    "joint.*", "joiner.*", "predictor.*",
)


@dataclass
class Selection:
    """The layers a spec selects (path -> module) and those kept in full precision (path ->
    why)."""

    chosen: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)


def _matches(path: str, patterns: tuple[str, ...]) -> str | None:
    return next((p for p in patterns if fnmatchcase(path, p)), None)


def quantizable_layers(model: Any) -> dict[str, Any]:
    """Every ``QuantizableGemm`` / ``QuantizableConv`` of ``model``, by module path."""
    return {path: m for path, m in model.named_modules()
            if isinstance(m, (QuantizableGemm, QuantizableConv))}


def select_layers(model: Any, spec: QuantizationSpec, method: Any, device: Any) -> Selection:
    """The layers ``spec`` selects for ``method`` on ``device``.

    With ``spec.layers`` (a pre-quantized checkpoint's record) those are the candidates; one
    the lane cannot serve here is kept (its dequantized float weight serves it).

    Raises:
        ValueError: a recorded layer that is not a quantizable layer of the model, a kind the
            method does not serve, or a selection of nothing.
    """
    layers = quantizable_layers(model)
    sel = Selection()
    exclude = DEFAULT_KEEP if spec.exclude is None else spec.exclude
    if spec.layers:
        absent = [p for p in spec.layers if p not in layers]
        if absent:
            raise ValueError(f"the quantization records layers this model does not have as "
                             f"quantizable layers: {absent[:5]} (a spec written for another "
                             "architecture or version)")
        recorded = set(spec.layers)
        candidates = {p: m for p, m in layers.items() if p in recorded}
        sel.kept = {p: "not in the recorded quantization" for p in layers if p not in recorded}
    else:
        candidates = {}
        for path, layer in layers.items():
            if layer.quant_kind not in spec.module_types:
                sel.kept[path] = (f"a {layer.quant_kind} layer (module_types: "
                                  f"{', '.join(spec.module_types)})")
            elif _matches(path, spec.include) is None:
                sel.kept[path] = "not included"
            elif (pattern := _matches(path, exclude)) is not None:
                sel.kept[path] = f"excluded by {pattern!r}"
            else:
                candidates[path] = layer
    for path, layer in candidates.items():
        _check_kind(path, layer, method)
        refusal = method.layer_refusal(layer, device)
        if refusal is not None:
            sel.kept[path] = refusal  # a recorded layer so refused runs its dequantized weight
            continue
        sel.chosen[path] = layer
    if not sel.chosen:
        raise ValueError(f"--quantization {spec.method} selects no layer of "
                         f"{type(model).__name__} (include {list(spec.include)}, exclude "
                         f"{list(exclude)}, module_types {list(spec.module_types)})")
    return sel


def _check_kind(path: str, layer: Any, method: Any) -> None:
    if layer.quant_kind not in method.module_types:
        raise ValueError(f"{path} is a {layer.quant_kind} layer; {method.name} serves "
                         f"{', '.join(method.module_types)} layers only (set module_types "
                         "accordingly)")
