"""``rnn_recurrence``: LSTM layers with the whole time loop in one launch.

Serves op ``lstm`` (routed by ``oasr.layers.rnn``) for CUDA tensors of any float dtype with
hidden size at most 1024. Per layer and direction the input half of every step is one GEMM here
(``F.linear`` in the input's dtype), and the recurrence is the kernel
(``oasr/csrc/kernels/rnn/recurrence.cuh``): fp32 state and accumulation, one block per sequence.
The torch path (``LSTM.forward_native``: a Python loop over steps, one launch per step per op)
is the oracle it is tested against; without a CUDA toolchain every call is the gap
``cuda-toolchain``.
"""

from __future__ import annotations

import ctypes
import weakref
from functools import lru_cache

import torch
import torch.nn.functional as F

from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.ops.build import RNN_CUDA

__all__ = ["MAX_HIDDEN", "recurrence", "recurrent_layers", "supports"]

MAX_HIDDEN = 1024
# The recurrence kernel's cell modes; it also has Elman cells (1 tanh, 2 relu), which no layer
# of the waist uses.
_MODES = {"lstm": 0}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = jit.load(RNN_CUDA)
    check(lib, lib.oasr_rnn_preload(), "rnn preload")
    return lib


def supports(x: torch.Tensor, *rest: object) -> bool:
    """Whether the kernel can serve the call: a CUDA float input and hidden size <= 1024 (the
    hidden size is read from the weights the call carries)."""
    if not (x.is_cuda and x.dtype in _DTYPES and x.dim() == 3):
        return False
    weights = rest[3] if len(rest) > 3 else None
    if not weights:
        return False
    return 1 <= weights[0][1].shape[1] <= MAX_HIDDEN


# id(parameter) -> (a weak reference to it, its version, the transposed fp32 copy). Keyed by
# identity (tensors do not hash by value) and checked against the live object, so weights
# freed and reallocated at the same address, or reusing an id, are never served stale.
_W_CACHE: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}


def _w_hh_t(w_hh: torch.Tensor) -> torch.Tensor:
    """W_hh as fp32 (H, G*H), cached per parameter and version (a decoder calls a layer once
    per emitted token; the transpose is not redone each time)."""
    # inference tensors (weights loaded under inference_mode) carry no version counter
    version = -1 if w_hh.is_inference() else w_hh._version
    key = id(w_hh)
    hit = _W_CACHE.get(key)
    if hit is not None and hit[0]() is w_hh and hit[1] == version:
        return hit[2]
    t = w_hh.detach().float().t().contiguous()
    _W_CACHE[key] = (weakref.ref(w_hh, lambda _, k=key: _W_CACHE.pop(k, None)), version, t)
    return t


def recurrence(xw: torch.Tensor, w_hh: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None,
               lengths: torch.Tensor | None, mode: str, reverse: bool
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One layer direction's recurrence. xw (B, T, G*H) fp32 (the input half, biases in),
    w_hh (G*H, H), h0/c0 (B, H) -> y (B, T, H), h_n, c_n (B, H), all fp32."""
    B, T, GH = xw.shape
    H = w_hh.shape[1]
    xw = xw.float().contiguous()
    h0 = h0.float().contiguous()
    lstm = mode == "lstm"
    c0 = c0.float().contiguous() if lstm and c0 is not None else None
    if lstm and c0 is None:
        raise ValueError("an LSTM recurrence needs its initial cell state")
    lens = None if lengths is None else lengths.to(device=xw.device, dtype=torch.int64)
    y = torch.empty(B, T, H, dtype=torch.float32, device=xw.device)
    h_n = torch.empty(B, H, dtype=torch.float32, device=xw.device)
    c_n = torch.empty_like(h_n) if lstm else None
    w = _w_hh_t(w_hh)
    lib = _library()
    check(lib, lib.oasr_rnn_recurrence(xw.data_ptr(), w.data_ptr(), h0.data_ptr(),
                                       ptr(c0).value or 0, ptr(lens).value or 0, y.data_ptr(),
                                       h_n.data_ptr(), ptr(c_n).value or 0, B, T, H,
                                       int(reverse), _MODES[mode], stream_handle(xw.device)),
          "rnn_recurrence")
    return y, h_n, c_n


def recurrent_layers(x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None,
                     lengths: torch.Tensor | None, weights: list, mode: str,
                     num_directions: int = 1
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The ``lstm`` op: x (B, T, in), h0/c0 (L*D, B, H), weights as
    ``LSTM.all_weights`` -> (y (B, T, D*H), h_n, c_n (L*D, B, H)) in x's dtype."""
    layer_in = x
    h_n, c_n = [], []
    for layer in range(len(weights) // num_directions):
        outs = []
        for direction in range(num_directions):
            idx = layer * num_directions + direction
            w_ih, w_hh, b_ih, b_hh = weights[idx]
            xw = F.linear(layer_in, w_ih, b_ih)
            if b_hh is not None:
                xw = xw + b_hh
            y, h, c = recurrence(xw, w_hh, h0[idx], None if c0 is None else c0[idx], lengths,
                                 mode, reverse=direction == 1)
            outs.append(y.to(x.dtype))
            h_n.append(h.to(x.dtype))
            if c is not None:
                c_n.append(c.to(x.dtype))
        layer_in = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
    return layer_in, torch.stack(h_n), torch.stack(c_n) if c_n else None

