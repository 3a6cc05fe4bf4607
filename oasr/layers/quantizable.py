"""Bases that let a quantization method take over a layer's forward.

``Linear``, ``LinearActivation`` and ``PointwiseConv1d`` are ``QuantizableGemm``; ``Conv1d`` and
``Conv2d`` are ``QuantizableConv``. A ``QuantMethod`` (oasr.quantization) attached as
``quant_method`` serves the forward instead of the float path, so a quantized checkpoint
applies to every architecture built from these layers.
"""

from __future__ import annotations

from typing import Any

from torch import nn


class _Quantizable(nn.Module):
    quant_kind: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.quant_method: Any | None = None


class QuantizableGemm(_Quantizable):
    quant_kind = "gemm"


class QuantizableConv(_Quantizable):
    quant_kind = "conv"
