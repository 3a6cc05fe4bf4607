"""The quantization axis: methods that take over a quantizable layer's forward.

``register_quant_method`` (a ``QuantMethod`` per scheme: ``int8``, ``int8-weight``, ``fp8``),
``register_lane`` (a ``ScaledMMLane``: one implementation of a scaled matmul a method runs on:
``fbgemm``, ``int-mm``, ``scaled-mm``), ``register_quant_algorithm`` (a ``QuantAlgorithm``
preparing the weights: ``absmax``, ``smoothquant``). A layer is quantizable when it derives from
``QuantizableGemm`` / ``QuantizableConv``; ``apply_quantization(model, spec, device)`` selects
layers by module path and attaches the method (``quantization.md``).

The bases and registries import no torch; the built-in entries are lazy ``module:attr`` strings.
"""

from __future__ import annotations

from typing import Any

from oasr.quantization.spec import (
    COMPUTE_TYPES,
    METHOD_NAMES,
    ComputeType,
    QuantizationSpec,
    parse_compute_type,
    parse_quantization,
    resolve_switches,
)
from oasr.registry import Registry


class QuantMethod:
    """Serves the layers a spec selects.

    ``create_weights(layer, weight)`` once per layer (the float weight, already smoothed by the
    algorithm, becomes the method's tensors: buffers ``qweight`` / ``weight_scale`` and, when
    smoothed, ``input_smooth``); ``apply(layer, x)`` per call, counted as a ``quantized`` call
    in the dispatch report; ``forward_native(layer, x)`` is the pure-torch reference of
    ``apply`` (the test oracle).

    Attributes:
        name: the registry name.
        module_types: the quantizable kinds it serves (``gemm``, ``conv``).
        lanes: the ``ScaledMMLane`` names it can run on, in order of preference per device
            (empty: the method computes on its own).
    """

    name: str = ""
    module_types: tuple[str, ...] = ("gemm",)
    lanes: tuple[str, ...] = ()

    def create_weights(self, layer: Any, weight: Any) -> None:
        raise NotImplementedError

    def apply(self, layer: Any, x: Any) -> Any:
        raise NotImplementedError

    def forward_native(self, layer: Any, x: Any) -> Any:
        raise NotImplementedError

    def layer_refusal(self, layer: Any, device: Any) -> str | None:
        """Why this method cannot serve ``layer`` on ``device`` (a shape its lane refuses);
        None: it can."""
        return None


class ScaledMMLane:
    """One implementation of a scaled matmul: ``matmul(layer, x2d)`` -> (M, N) with the bias,
    and ``reference(layer, x2d)``, the same numerics in plain torch.

    Attributes:
        name: the registry name.
        method: the method whose tensors it reads (``int8``, ``fp8``).
        activations: how it quantizes activations: ``token`` (a scale per row) or ``tensor``.
    """

    name: str = ""
    method: str = ""
    activations: str = "token"

    @classmethod
    def unavailable(cls, device: Any) -> str | None:
        """Why the lane cannot run on ``device`` (a sentence naming the fix); None: it can."""
        raise NotImplementedError

    def prepare(self, layer: Any) -> None:
        """Derive the lane's own form of the layer's quantized weights (once per layer)."""

    def matmul(self, layer: Any, x: Any) -> Any:
        raise NotImplementedError

    def reference(self, layer: Any, x: Any) -> Any:
        raise NotImplementedError

    def layer_refusal(self, layer: Any, device: Any) -> str | None:
        """Why the lane cannot serve ``layer`` (its shape); None: it can."""
        return None


class QuantAlgorithm:
    """Prepares the weights before a method quantizes them: ``smoothing(layers, stats)`` ->
    a per-input-channel factor for each layer it smooths (the weight's columns are multiplied
    by it, the layer's input divided by it)."""

    name: str = ""
    needs_calibration: bool = False

    def smoothing(self, model: Any, layers: dict[str, Any], spec: QuantizationSpec,
                  stats: Any | None) -> dict[str, Any]:
        raise NotImplementedError


QUANT_METHODS: Registry[type[QuantMethod]] = Registry(
    "quantization method", entry_point_group="oasr.quant_methods"
)
LANES: Registry[type[ScaledMMLane]] = Registry("scaled-mm lane")
QUANT_ALGORITHMS: Registry[type[QuantAlgorithm]] = Registry("quantization algorithm")


def register_quant_method(name: str):
    return QUANT_METHODS.register(name)


def register_lane(name: str):
    return LANES.register(name)


def register_quant_algorithm(name: str):
    return QUANT_ALGORITHMS.register(name)


QUANT_METHODS.register("int8", "oasr.quantization.methods:Int8Method")
QUANT_METHODS.register("int8-weight", "oasr.quantization.methods:Int8WeightOnlyMethod")
QUANT_METHODS.register("fp8", "oasr.quantization.methods:Fp8Method")
LANES.register("fbgemm", "oasr.quantization.lanes:FbgemmDynamicLane")
LANES.register("int-mm", "oasr.quantization.lanes:IntMMLane")
LANES.register("scaled-mm", "oasr.quantization.lanes:ScaledMMFp8Lane")
QUANT_ALGORITHMS.register("absmax", "oasr.quantization.algorithms:AbsMax")
QUANT_ALGORITHMS.register("smoothquant", "oasr.quantization.algorithms:SmoothQuant")


def apply_quantization(model: Any, spec: QuantizationSpec | str | None, device: Any = None,
                       stats: Any | None = None, smoothing: dict[str, Any] | None = None
                       ) -> Any:
    """Quantize ``model`` in place (see ``oasr.quantization.apply``); returns the report."""
    from oasr.quantization.apply import apply_quantization as apply

    return apply(model, spec, device, stats=stats, smoothing=smoothing)


__all__ = [
    "COMPUTE_TYPES",
    "ComputeType",
    "LANES",
    "METHOD_NAMES",
    "QUANT_ALGORITHMS",
    "QUANT_METHODS",
    "QuantAlgorithm",
    "QuantMethod",
    "QuantizationSpec",
    "ScaledMMLane",
    "apply_quantization",
    "parse_compute_type",
    "parse_quantization",
    "register_lane",
    "register_quant_algorithm",
    "register_quant_method",
    "resolve_switches",
]
