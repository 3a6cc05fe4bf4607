"""The CUDA driver asked through ctypes, without torch: the first visible device.

``oasr gaps`` lists the device and whether each kernel library is built for it without
importing torch (which costs a listing about a second); the driver (``libcuda``) answers that:
``cuInit``, ``cuDeviceGetCount``, ``cuDeviceGetName`` and the compute capability of device 0,
the first one ``CUDA_VISIBLE_DEVICES`` leaves visible, as ``torch.cuda`` numbers them. Builds
keep asking torch for the current device (``jit.target_arch``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

__all__ = ["DriverDevice", "first_device"]

_CAPABILITY_MAJOR, _CAPABILITY_MINOR = 75, 76  # CUdevice_attribute


@dataclass(frozen=True)
class DriverDevice:
    name: str
    arch: str  # "sm_90"


def first_device() -> DriverDevice | str:
    """The first visible device, or why there is none (no driver, no device)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    if lib.cuInit(0) != 0:
        return "the CUDA driver did not initialise (cuInit failed)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device visible"
    dev = ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if (lib.cuDeviceGet(ctypes.byref(dev), 0) != 0
            or lib.cuDeviceGetName(name, len(name), dev) != 0
            or lib.cuDeviceGetAttribute(ctypes.byref(major), _CAPABILITY_MAJOR, dev) != 0
            or lib.cuDeviceGetAttribute(ctypes.byref(minor), _CAPABILITY_MINOR, dev) != 0):
        return "the CUDA driver could not describe device 0"
    return DriverDevice(name.value.decode(errors="replace"), f"sm_{major.value}{minor.value}")
