"""The built-in quantization methods: ``int8``, ``int8-weight`` and ``fp8``.

Each replaces a selected GEMM's float ``weight`` with ``qweight`` (N, K) and ``weight_scale``
(N,) (one scale per output channel), plus ``input_smooth`` (K,) when the algorithm smoothed the
layer (the input is multiplied by it before quantization), and serves the layer's forward:

* ``int8``: dynamic int8 activations on a lane (``fbgemm`` on the CPU, per call; ``int-mm``
  per token, CPU or CUDA) and int32 accumulation.
* ``int8-weight``: int8 weights only, converted to the activation dtype on every call and
  rescaled after the product: the resident weights shrink (to about a quarter of fp32, a
  half of fp16), the arithmetic stays float.
* ``fp8``: e4m3 weights and per-token e4m3 activations on ``torch._scaled_mm`` (sm_89+).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from oasr.layers.linear import _activate
from oasr.ops import counting
from oasr.quantization import LANES, QuantMethod, ScaledMMLane
from oasr.quantization.numerics import quantize_weight_fp8, quantize_weight_int8
from oasr.quantization.spec import QuantizationSpec

__all__ = ["Fp8Method", "Int8Method", "Int8WeightOnlyMethod", "QuantizationUnavailable",
           "QUANTIZED_CASE"]

QUANTIZED_CASE = "quantized"  # the dispatch case a quantized call is counted under
_DEQUANT = "dequant"  # the lane name of a method that computes without one


class QuantizationUnavailable(ValueError):
    """The method cannot run on this device (no lane serves it); the message names the fix."""


def replace_weight(layer: Any, qweight: torch.Tensor, scale: torch.Tensor) -> None:
    """Swap the layer's float ``weight`` parameter for ``qweight`` / ``weight_scale`` buffers.

    A ``TiedLinear`` keeps its tied weight (the embedding owns it and still reads it)."""
    if "weight" in layer._parameters:
        del layer._parameters["weight"]
    layer.register_buffer("qweight", qweight)
    layer.register_buffer("weight_scale", scale)


class _WeightQuantizedGemm(QuantMethod):
    """A GEMM method: per-output-channel weight quantization, a lane (or none), counting."""

    module_types = ("gemm",)

    def __init__(self, spec: QuantizationSpec, device: Any, offline: bool = False) -> None:
        """``offline``: quantize weights for a checkpoint (``oasr convert --quantize``) on any
        device: the lane is the method's first (its shape limits still select the layers) and
        is neither checked against the device nor run."""
        self.spec = spec
        self.device = torch.device(device if device is not None else "cpu")
        self.offline = offline
        if offline:
            first = spec.lane or (self.lanes[0] if self.lanes else None)
            self.lane: ScaledMMLane | None = LANES.get(first)() if first else None
        else:
            self.lane = self._pick_lane(spec.lane)
        self.lane_name = self.lane.name if self.lane is not None else _DEQUANT
        self._key = (QUANTIZED_CASE, f"{self.name}:{self.lane_name}")

    # -- lanes --------------------------------------------------------------------------
    def device_lanes(self) -> tuple[str, ...]:
        """The lanes to try on this device, in order of preference."""
        return self.lanes

    def _pick_lane(self, requested: str | None) -> ScaledMMLane | None:
        if not self.lanes:
            if requested not in (None, _DEQUANT):
                raise ValueError(f"{self.name} computes without a lane; lane {requested!r} "
                                 "does not apply (leave it unset)")
            return None
        names = (requested,) if requested else self.device_lanes()
        reasons = []
        for name in names:
            cls = LANES.get(name)
            if cls.method != self.name:
                raise ValueError(f"lane {name!r} serves {cls.method}, not {self.name}; lanes "
                                 f"of {self.name}: {', '.join(self.lanes)}")
            why = cls.unavailable(self.device)
            if why is None:
                return cls()
            reasons.append(f"{name}: {why}")
        raise QuantizationUnavailable(f"--quantization {self.name} cannot run on "
                                      f"{self.device}: " + "; ".join(reasons))

    def layer_refusal(self, layer: Any, device: Any) -> str | None:
        return None if self.lane is None else self.lane.layer_refusal(layer, device)

    # -- weights ------------------------------------------------------------------------
    def quantize(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def create_weights(self, layer: Any, weight: torch.Tensor) -> None:
        q, scale = self.quantize(weight)
        replace_weight(layer, q.to(weight.device), scale.to(weight.device))
        if self.lane is not None and not self.offline:
            self.lane.prepare(layer)

    # -- forward ------------------------------------------------------------------------
    def _product(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        """(M, K) -> (M, N) with the bias."""
        assert self.lane is not None
        return self.lane.matmul(layer, x)

    def _reference_product(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        assert self.lane is not None
        return self.lane.reference(layer, x)

    def _run(self, layer: Any, x: torch.Tensor, product: Any) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])  # (M, K)
        smooth = layer._buffers.get("input_smooth")
        if smooth is not None:
            x2 = x2 * smooth.to(x2.dtype)
        if x2.shape[0] == 0:
            y = x2.new_empty(0, layer.out_features)
        else:
            y = product(layer, x2)
        return _activate(y.reshape(*lead, y.shape[-1]), layer.activation)

    def apply(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        if self.offline:
            raise RuntimeError(f"{self.name} was applied offline (for a checkpoint); load the "
                               "checkpoint to run it")
        counting.count(self._key)
        return self._run(layer, x, self._product)

    def forward_native(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        return self._run(layer, x, self._reference_product)


class Int8Method(_WeightQuantizedGemm):
    """int8 weights per output channel, dynamic int8 activations, int32 accumulation."""

    name = "int8"
    lanes = ("fbgemm", "int-mm")

    def device_lanes(self) -> tuple[str, ...]:
        # fbgemm is the fastest measured on the CPU; CUDA has int-mm alone.
        return ("int-mm",) if self.device.type == "cuda" else self.lanes

    def quantize(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return quantize_weight_int8(weight)


class Fp8Method(_WeightQuantizedGemm):
    """e4m3 weights per output channel, dynamic per-token e4m3 activations (sm_89+)."""

    name = "fp8"
    lanes = ("scaled-mm",)

    def quantize(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return quantize_weight_fp8(weight)


class Int8WeightOnlyMethod(_WeightQuantizedGemm):
    """int8 weights per output channel; the product runs in the activation dtype."""

    name = "int8-weight"
    lanes = ()

    def quantize(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return quantize_weight_int8(weight)

    def _product(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        # Convert, multiply, then rescale the (M, N) output: cheaper than rescaling the
        # (N, K) weight when M is small (a decoder step), the case this method is for.
        y = F.linear(x, layer.qweight.to(x.dtype))
        y = y.mul_(layer.weight_scale.to(x.dtype))
        bias = layer.bias
        return y if bias is None else y.add_(bias)

    def _reference_product(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        w = layer.qweight.double() * layer.weight_scale.double()[:, None]
        y = x.double() @ w.t()
        if layer.bias is not None:
            y = y + layer.bias.double()
        return y.to(x.dtype)
