"""``paged_decode``: the decode-step attention over the paged KV cache (one query per row).

Serves op ``paged_attention`` (contract in oasr/cache/paged_attention.py) when the query is a
single step (Tq == 1), fp16 or bf16, head dim 32, 64 or 128, and the cache contiguous: the
Whisper decoder's self- and cross-attention at every generated token. It reads each key
straight from its block (no gathered copy of the cache, as the torch path makes), splits a
row's keys over several blocks when rows x heads alone would not fill the GPU, and keeps the
softmax in fp32. Prefill (Tq > 1) and other head dims stay on the torch path through the
declared gap ``fmha``; without a CUDA toolchain to build it, every call is the gap
``cuda-toolchain``; both counted by ``oasr.ops``.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import torch

from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.ops.build import PAGED_DECODE

__all__ = ["HEAD_DIMS", "MAX_KEYS", "paged_decode", "supports"]

HEAD_DIMS = (32, 64, 128)
MAX_KEYS = 50_000  # scores live in shared memory, 4 bytes a key
_DTYPES = {torch.float16: 0, torch.bfloat16: 1}


class _Args(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("q", "k_cache", "v_cache", "table", "lens",
                                               "starts", "out", "ws_max", "ws_sum", "ws_acc")] + [
        ("q_stride_b", ctypes.c_int64), ("q_stride_h", ctypes.c_int64)] + [
        (n, ctypes.c_int) for n in ("H", "H_kv", "W", "block_size", "L", "splits",
                                    "split_keys")] + [("scale", ctypes.c_float)]


@lru_cache(maxsize=8)
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def split_count(rows: int, heads: int, keys: int, device: torch.device) -> int:
    """Key splits per (row, head): enough blocks for ~8 per multiprocessor, each split at
    least 256 keys."""
    sms = _multiprocessors(device.index if device.index is not None else
                           torch.cuda.current_device())
    return max(1, min(-(-keys // 256), -(-8 * sms // max(1, rows * heads))))


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = jit.load(PAGED_DECODE)  # argtypes from PAGED_DECODE's checked table (_Args*: ptr)
    check(lib, lib.oasr_paged_decode_preload(), "paged_decode preload")
    return lib


def supports(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether the kernel can serve this call (the rest goes to the ``fmha`` gap; whether it
    can be built here is the route's ``cuda-toolchain`` check)."""
    return (q.dim() == 4 and q.shape[2] == 1 and q.dtype in _DTYPES
            and k_cache.dtype == q.dtype and v_cache.dtype == q.dtype
            and k_cache.is_contiguous() and v_cache.is_contiguous()
            and q.shape[3] in HEAD_DIMS and k_cache.shape[3] == q.shape[3]
            and q.shape[1] % k_cache.shape[2] == 0
            and q.stride(3) == 1 and q.stride(0) % 8 == 0 and q.stride(1) % 8 == 0
            and q.data_ptr() % 16 == 0)


def _long(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None or t.dtype == torch.int64:
        return t
    return t.to(torch.int64)


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 table: torch.Tensor, kv_lens: torch.Tensor | None,
                 kv_starts: torch.Tensor | None, width: int | None, scale: float,
                 causal: bool) -> torch.Tensor:
    """q (B, H, 1, D) over the keys ``table`` names -> (B, H, 1, D). With one query, causal
    attention end-aligned at ``width`` sees every key of the window, so ``causal`` changes
    nothing here."""
    del causal
    B, H, _, D = q.shape
    _, block_size, H_kv, _ = k_cache.shape
    W = table.shape[1]
    L = W * block_size if width is None else min(int(width), W * block_size)
    if L > MAX_KEYS:
        raise ValueError(f"paged_decode reads at most {MAX_KEYS} keys per row, asked {L}")
    table, kv_lens, kv_starts = _long(table.contiguous()), _long(kv_lens), _long(kv_starts)
    out = torch.empty(B, H, 1, D, dtype=q.dtype, device=q.device)
    splits = split_count(B, H, L, q.device)
    ws = torch.empty(B * H * splits * (D + 2), dtype=torch.float32, device=q.device)
    ws_max, ws_sum, ws_acc = ws.split([B * H * splits, B * H * splits, B * H * splits * D])
    args = _Args(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), table.data_ptr(),
                 ptr(kv_lens).value or 0, ptr(kv_starts).value or 0, out.data_ptr(),
                 ws_max.data_ptr(), ws_sum.data_ptr(), ws_acc.data_ptr(),
                 q.stride(0), q.stride(1), H, H_kv, W, block_size, L, splits,
                 -(-L // splits), float(scale))
    lib = _library()
    check(lib, lib.oasr_paged_decode(ctypes.byref(args), B, D, _DTYPES[q.dtype],
                                     stream_handle(q.device)), "paged_decode")
    return out

