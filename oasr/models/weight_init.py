"""``skip_weight_init``: build a model without random weights that a checkpoint replaces next.

Constructing a model draws every weight from its initialiser (``nn.init.*``); a loader then
overwrites all of them, so that work is wasted start-up (a noticeable part of a one-row run).
Inside this context the initialisers return their tensor untouched, so parameters hold
whatever ``torch.empty`` gave them. Use it only where a strict load follows: a parameter the
checkpoint lacks would keep uninitialised memory, and a strict load refuses that by name.
Buffers computed in a module's ``__init__`` (positions, windows) are not initialisers and are
unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.nn as nn

# Every in-place initialiser torch's own modules and ours call at construction.
_INITIALISERS = (
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
    "sparse_",
)
_lock = threading.Lock()


def _keep(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    return tensor


@contextmanager
def skip_weight_init() -> Iterator[None]:
    """Within the block, ``torch.nn.init`` initialisers leave their tensor as it is."""
    with _lock:
        saved = {name: getattr(nn.init, name) for name in _INITIALISERS
                 if hasattr(nn.init, name)}
        try:
            for name in saved:
                setattr(nn.init, name, _keep)
            yield
        finally:
            for name, fn in saved.items():
                setattr(nn.init, name, fn)
