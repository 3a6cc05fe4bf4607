"""``transducer_greedy_decode``: the whole transducer greedy search in one CUDA launch.

One CTA per row runs ``oasr/csrc/kernels/transducer/greedy_decode.cuh`` (the joiner GEMV,
argmax, the emit/advance bookkeeping and the predictor step all on the device); the host reads
the hypotheses once. The same header runs on the host as ``oasr._C.transducer.greedy_decode``,
which is how its algorithm is tested without a GPU; this binding's own oracle test is
``tests/engine/decode/test_transducer_fused.py`` (``-m gpu``). It is op ``transducer_greedy``
of ``oasr.ops`` (declared in ``oasr.kernels.declarations``): ``route_supports`` is its
``supports``.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import torch

from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.kernels.transducer_args import FusedTensors, GreedyLimits
from oasr.ops.build import TRANSDUCER_CUDA, buildable

__all__ = ["greedy_decode", "route_supports", "smem_fits"]

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    return jit.load(TRANSDUCER_CUDA)


@lru_cache(maxsize=64)
def smem_fits(J: int, D: int, V: int, device_index: int) -> bool:
    """Whether one row's scratch (J, D, V floats) fits the device's shared memory per block."""
    lib = _library()
    need, limit = ctypes.c_int64(), ctypes.c_int64()
    with torch.cuda.device(device_index):
        check(lib, lib.oasr_transducer_greedy_smem(J, D, V, ctypes.byref(need),
                                                   ctypes.byref(limit)), "transducer smem")
    return need.value <= limit.value


def route_supports(hidden: torch.Tensor, weights: FusedTensors) -> bool:
    """Op ``transducer_greedy``'s ``supports``: a dtype the kernel reads and one row's scratch
    within the device's shared memory (else the gap ``transducer-scratch``). Without a library
    to ask (no toolchain) it answers True, so the route counts the gap ``cuda-toolchain``."""
    if hidden.dtype not in _DTYPES:
        return False
    if not buildable(TRANSDUCER_CUDA):
        return True
    return smem_fits(weights.out_w.shape[1], weights.embedding.shape[1], weights.out_w.shape[0],
                     hidden.device.index or 0)


def greedy_decode(enc: torch.Tensor, lengths: torch.Tensor, weights: FusedTensors,
                  limits: GreedyLimits) -> tuple[torch.Tensor, ...]:
    """enc (B, T, J) projected frames, ``weights`` in enc's dtype, all on one CUDA device ->
    (tokens, frames (B, cap) int32, probs (B, cap) fp32, counts (B,) int32, scores (B,) fp32),
    on the device; ``counts[b] == cap + 1`` when row b emitted more than ``limits.cap``
    labels."""
    B, T, J = enc.shape
    V, D = weights.embedding.shape
    dev = enc.device
    cap = limits.cap
    C = 1 if weights.conv is None else weights.conv.shape[2]
    tensors = [t.contiguous() if t is not None else None
               for t in (enc, weights.embedding, weights.conv, weights.dec_w, weights.dec_b,
                         weights.out_w, weights.out_b)]
    if any(t is not None and (t.dtype != enc.dtype or t.device != dev) for t in tensors):
        raise ValueError("transducer greedy_decode: every tensor in enc's dtype and device")
    enc, embedding, conv, dec_w, dec_b, out_w, out_b = tensors
    lens = lengths.to(device=dev, dtype=torch.int64).contiguous()
    tokens = torch.empty(B, cap, dtype=torch.int32, device=dev)
    frames = torch.empty_like(tokens)
    probs = torch.empty(B, cap, dtype=torch.float32, device=dev)
    counts = torch.empty(B, dtype=torch.int32, device=dev)
    scores = torch.empty(B, dtype=torch.float32, device=dev)
    lib = _library()
    check(lib, lib.oasr_transducer_greedy_decode(
        enc.data_ptr(), lens.data_ptr(), embedding.data_ptr(), ptr(conv).value or 0,
        dec_w.data_ptr(), ptr(dec_b).value or 0, out_w.data_ptr(), ptr(out_b).value or 0,
        B, T, J, D, V, C, weights.groups, weights.blank, limits.unk, limits.max_sym,
        int(weights.relu), cap, tokens.data_ptr(),
        frames.data_ptr(), probs.data_ptr(), counts.data_ptr(), scores.data_ptr(),
        _DTYPES[enc.dtype], stream_handle(dev)), "transducer_greedy_decode")
    return tokens, frames, probs, counts, scores
