"""``quantize_rows_fp8``: per-token e4m3 quantization of an (M, K) activation block, one launch.

Serves op ``quantize_rows_fp8`` (routed by ``oasr.quantization.lanes``) for CUDA fp32, fp16 and
bf16 blocks whose columns are contiguous: the scaled-mm lane's activation step before each
``torch._scaled_mm``. The kernel (``oasr/csrc/kernels/quantization/rows_fp8.cuh``) gives each
row one warp that reads it twice (absmax, then quantize) and writes the e4m3 row and its scale;
the torch statement (``oasr.quantization.numerics.quantize_rows_fp8``) takes six passes over
the block in fp32. Same fp32 arithmetic (IEEE division, round to nearest even), so the outputs
are equal bit for bit. Other layouts fall through the declared gap ``quant-rows-layout``.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import torch

from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.ops.build import QUANT_CUDA
from oasr.quantization.numerics import FP8_DTYPE

__all__ = ["quantize_rows_fp8", "supports"]

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    return jit.load(QUANT_CUDA)


def supports(x: torch.Tensor, *rest: object) -> bool:
    return (x.is_cuda and x.dim() == 2 and x.dtype in _DTYPES and x.shape[1] >= 1
            and (x.stride(1) == 1 or x.shape[1] == 1)
            and (x.shape[0] <= 1 or x.stride(0) >= x.shape[1]))


def quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) CUDA fp32/fp16/bf16, unit column stride -> e4m3 (M, K) contiguous and fp32
    scales (M, 1), as ``oasr.quantization.numerics.quantize_rows_fp8``."""
    if not supports(x):
        raise ValueError(f"quantize_rows_fp8 serves 2-D CUDA fp32/fp16/bf16 blocks with "
                         f"contiguous columns, got {tuple(x.shape)} {x.dtype} on {x.device} "
                         f"(strides {x.stride()})")
    m, k = x.shape
    q = torch.empty(m, k, dtype=FP8_DTYPE, device=x.device)
    scales = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    if m == 0:
        return q, scales
    lib = _library()
    ld = x.stride(0) if m > 1 else k
    check(lib, lib.oasr_quantize_rows_fp8(ptr(x), _DTYPES[x.dtype], m, k, ld, ptr(q),
                                          ptr(scales), stream_handle(x.device)),
          "quantize_rows_fp8")
    return q, scales
