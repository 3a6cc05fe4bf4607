"""The calling convention every kernel library follows, as ctypes sees it.

Launchers take raw device pointers (``c_void_p``), sizes, and the CUDA stream; they return a
``cudaError_t`` as an ``int`` (0: success). ``check`` raises with the library's message. The
argtypes come from the library's build spec, checked against its exported table at load
(``oasr.kernels.jit.load``).
"""

from __future__ import annotations

import ctypes

import torch

__all__ = ["KernelLaunchError", "check", "ptr", "stream_handle"]


class KernelLaunchError(RuntimeError):
    """A kernel launch returned a CUDA error."""


def check(lib: ctypes.CDLL, code: int, what: str) -> None:
    if code != 0:
        lib.oasr_error_string.restype = ctypes.c_char_p
        lib.oasr_error_string.argtypes = [ctypes.c_int]
        msg = lib.oasr_error_string(code).decode()
        raise KernelLaunchError(f"{what}: CUDA error {code} ({msg})")


def ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    """A tensor's device address (NULL for ``None``); the caller keeps the tensor alive."""
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


def stream_handle(device: torch.device | None = None) -> ctypes.c_void_p:
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
