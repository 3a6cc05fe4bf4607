"""The quantization axis: methods that take over a quantizable layer's forward.

``register_quant_method`` (a ``QuantMethod`` per scheme), ``register_lane`` (a scaled-matmul
implementation a method can run on), ``register_quant_algorithm`` (how weights are quantized
offline). A layer is quantizable when it derives from ``QuantizableGemm`` / ``QuantizableConv``.
"""

from __future__ import annotations

from typing import Any

from oasr.registry import Registry


class QuantMethod:
    """Serves a quantized layer: ``create_weights`` on load, ``apply(layer, x)`` per call."""

    module_types: tuple[str, ...] = ("gemm",)

    def create_weights(self, layer: Any) -> None:
        raise NotImplementedError

    def apply(self, layer: Any, x: Any) -> Any:
        raise NotImplementedError


class ScaledMMLane:
    """One implementation of a scaled matmul (e.g. fp8 per-tensor on sm_90)."""


class QuantAlgorithm:
    """Offline weight quantization (calibration, smoothing)."""


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


__all__ = [
    "QuantMethod",
    "ScaledMMLane",
    "QuantAlgorithm",
    "QUANT_METHODS",
    "LANES",
    "QUANT_ALGORITHMS",
    "register_quant_method",
    "register_lane",
    "register_quant_algorithm",
]
