"""The scaled-matmul lanes: one implementation each of ``y = dequant(q(x) @ q(W)^T) + b``.

* ``fbgemm`` (CPU, int8): torch's dynamic int8 linear (``quantized.linear_dynamic`` on the x86
  engine, FBGEMM's kernels): activations asymmetric uint8 with one scale per call, quantized,
  multiplied and dequantized inside one op, on weights prepacked once. The fastest int8 path
  measured on the CPU (docs/quantization.md).
* ``int-mm`` (CPU or CUDA, int8): per-token symmetric int8 activations, ``torch._int_mm``
  (int32 accumulation), dequantized by the token's and the channel's scale.
* ``scaled-mm`` (CUDA sm_89+, fp8): per-token e4m3 activations, ``torch._scaled_mm`` with
  row-wise scales (a scale per token, one per output channel), fp32 accumulation.

Each lane's ``reference`` is its arithmetic in plain torch (float64 products of the same
quantized values), the oracle its tests hold ``matmul`` to.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from oasr import ops
from oasr.quantization import ScaledMMLane
from oasr.quantization.numerics import (
    FP8_DTYPE,
    quantize_rows_fp8,
    quantize_rows_int8,
    tensor_qparams,
)

__all__ = ["FbgemmDynamicLane", "IntMMLane", "ScaledMMFp8Lane", "cpu_has_vnni"]

# The fp8 lane's activation step: one kernel launch on CUDA (oasr.kernels.quant_cuda), the
# torch statement (numerics.quantize_rows_fp8) elsewhere and for the declared gap.
_QUANTIZE_ROWS_FP8 = ops.route("quantize_rows_fp8", "quant-rows-layout", scope=ops.CUDA,
                               provider="oasr.kernels.quant_cuda")


def _quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    kernel = _QUANTIZE_ROWS_FP8.select(x)
    return quantize_rows_fp8(x) if kernel is None else kernel(x)


def _bias(layer: Any) -> torch.Tensor | None:
    return None if layer.bias is None else layer.bias.detach()


def _reference_product(xq: torch.Tensor, x_scale: torch.Tensor | float, layer: Any,
                       out_dtype: torch.dtype) -> torch.Tensor:
    """float64 (xq * x_scale) @ (qweight * weight_scale)^T + bias, cast to ``out_dtype``.

    xq: (M, K) quantized values as floats (zero point removed); x_scale: (M, 1) or a float."""
    w = layer.qweight.double() * layer.weight_scale.double()[:, None]
    y = (xq.double() * (x_scale.double() if torch.is_tensor(x_scale) else x_scale)) @ w.t()
    bias = _bias(layer)
    if bias is not None:
        y = y + bias.double()
    return y.to(out_dtype)


@contextlib.contextmanager
def _quantized_tensor_api() -> Iterator[None]:
    """torch warns that its quantized-tensor constructors are deprecated (docs/quantization.md
    says what replaces them); the lane's use of them is deliberate, so the warning is not
    repeated to every user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        yield


@functools.lru_cache(maxsize=1)
def cpu_has_vnni() -> bool:
    """Whether the CPU multiplies u8 x s8 into int32 without an int16 step (AVX512-VNNI or
    AVX-VNNI). Without it FBGEMM's u8 x s8 pairs can saturate, so the lane quantizes the
    activations to 7 bits (``reduce_range``), as torch does by default."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split()
                    return "avx512_vnni" in flags or "avx_vnni" in flags
    except OSError:
        return False
    return False


class FbgemmDynamicLane(ScaledMMLane):
    name = "fbgemm"
    method = "int8"
    activations = "tensor"

    def __init__(self) -> None:
        self.reduce_range = not cpu_has_vnni()

    @classmethod
    def unavailable(cls, device: Any) -> str | None:
        if torch.device(device).type != "cpu":
            return (f"the fbgemm lane runs on the CPU, not {device}: use lane int-mm (int8) "
                    "or fp8 on CUDA")
        engine = torch.backends.quantized.engine
        if engine not in ("x86", "fbgemm"):
            return (f"torch's quantized engine is {engine!r}; the fbgemm lane needs 'x86' or "
                    "'fbgemm' (torch.backends.quantized.engine) or use lane int-mm")
        return None

    def prepare(self, layer: Any) -> None:
        q, scale = layer.qweight, layer.weight_scale
        zeros = torch.zeros(q.shape[0], dtype=torch.long)
        bias = _bias(layer)
        with _quantized_tensor_api():
            qw = torch._make_per_channel_quantized_tensor(q, scale.double(), zeros, 0)
            # A plain attribute (not a buffer): the packed weights are derived, never saved.
            layer._fbgemm_packed = torch.ops.quantized.linear_prepack(
                qw, None if bias is None else bias.float())

    def matmul(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.quantized.linear_dynamic(x.float().contiguous(), layer._fbgemm_packed,
                                               self.reduce_range)
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    def reference(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        xf = x.float().contiguous()
        scale, zero_point = tensor_qparams(xf, self.reduce_range)
        with _quantized_tensor_api():
            xq = torch.quantize_per_tensor(xf, scale, zero_point, torch.quint8).int_repr()
        return _reference_product(xq.int() - zero_point, scale, layer, x.dtype)


class IntMMLane(ScaledMMLane):
    name = "int-mm"
    method = "int8"
    activations = "token"
    # CUDA's _int_mm needs more than 16 rows and K, N in multiples of 8.
    _CUDA_MIN_ROWS = 17
    _CUDA_ALIGN = 8

    @classmethod
    def unavailable(cls, device: Any) -> str | None:
        dev = torch.device(device)
        if dev.type == "cuda":
            major, minor = torch.cuda.get_device_capability(dev)
            if (major, minor) < (8, 0):
                return (f"torch._int_mm needs sm_80 or newer; this GPU is sm_{major}{minor}: "
                        "use int8-weight")
            return None
        if dev.type != "cpu":
            return f"the int-mm lane runs on the CPU or CUDA, not {device}"
        return None

    def layer_refusal(self, layer: Any, device: Any) -> str | None:
        n, k = layer.weight.shape
        if torch.device(device).type == "cuda" and (k % self._CUDA_ALIGN or n % self._CUDA_ALIGN):
            return f"({n}, {k}) is not a multiple of {self._CUDA_ALIGN} (torch._int_mm on CUDA)"
        return None

    def prepare(self, layer: Any) -> None:
        layer._int_mm_weight = layer.qweight.t()  # (K, N) column-major, as cuBLAS wants it

    def matmul(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = quantize_rows_int8(x)
        m = xq.shape[0]
        if xq.is_cuda and m < self._CUDA_MIN_ROWS:
            xq = torch.nn.functional.pad(xq, (0, 0, 0, self._CUDA_MIN_ROWS - m))
        acc = torch._int_mm(xq, layer._int_mm_weight)[:m]  # (M, N) int32, exact
        y = acc.float().mul_(x_scale).mul_(layer.weight_scale)
        bias = _bias(layer)
        if bias is not None:
            y.add_(bias.float())
        return y.to(x.dtype)

    def reference(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = quantize_rows_int8(x)
        return _reference_product(xq, x_scale, layer, x.dtype)


class ScaledMMFp8Lane(ScaledMMLane):
    name = "scaled-mm"
    method = "fp8"
    activations = "token"
    _ALIGN = 16  # fp8 GEMMs need K and N in multiples of 16

    @classmethod
    def unavailable(cls, device: Any) -> str | None:
        dev = torch.device(device)
        if dev.type != "cuda":
            return (f"fp8 runs on CUDA GPUs of sm_89 or newer (Ada, Hopper), not on {dev.type}: "
                    "use --quantization int8 on the CPU")
        major, minor = torch.cuda.get_device_capability(dev)
        if (major, minor) < (8, 9):
            return (f"fp8 needs sm_89 or newer (Ada, Hopper); this GPU is sm_{major}{minor}: "
                    "use --quantization int8 or int8-weight")
        return None

    def layer_refusal(self, layer: Any, device: Any) -> str | None:
        n, k = layer.weight.shape
        if k % self._ALIGN or n % self._ALIGN:
            return f"({n}, {k}) is not a multiple of {self._ALIGN} (fp8 torch._scaled_mm)"
        return None

    def prepare(self, layer: Any) -> None:
        layer._scaled_mm_weight = layer.qweight.t()  # (K, N) column-major
        layer._scaled_mm_scale = layer.weight_scale.float().reshape(1, -1)

    def matmul(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        return self.scaled_mm(layer, x)

    @staticmethod
    def scaled_mm(layer: Any, x: torch.Tensor) -> torch.Tensor:
        """The lane's kernel call (also what the CPU tests hold to the reference: torch's CPU
        ``_scaled_mm`` takes the same layout, though the lane refuses to serve the CPU)."""
        xq, x_scale = _quantize_rows_fp8(x)
        bias = _bias(layer)
        if x.dtype == torch.bfloat16:
            # Row-wise scaling produces bf16; the bias joins in the GEMM's epilogue (fp32, one
            # rounding) rather than as a second pass over the output.
            return torch._scaled_mm(xq, layer._scaled_mm_weight, scale_a=x_scale,
                                    scale_b=layer._scaled_mm_scale, out_dtype=torch.bfloat16,
                                    bias=None if bias is None else bias.to(torch.bfloat16))
        y = torch._scaled_mm(xq, layer._scaled_mm_weight, scale_a=x_scale,
                             scale_b=layer._scaled_mm_scale, out_dtype=torch.bfloat16)
        y = y.to(x.dtype)
        return y if bias is None else y.add_(bias.to(x.dtype))

    def reference(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = quantize_rows_fp8(x)
        assert xq.dtype == FP8_DTYPE
        return _reference_product(xq.float(), x_scale, layer, x.dtype)
