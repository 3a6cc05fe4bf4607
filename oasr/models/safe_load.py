"""Reading pickled checkpoints without running their code.

Every ``.pt`` / ``.bin`` / ``.ckpt`` a converter reads goes through :func:`load_torch_checkpoint`:
``torch.load(weights_only=True)``, whose unpickler builds tensors, containers and primitives
only, plus a short allow-list of classes whose construction has no effect beyond making a value
(``pathlib`` paths, which icefall's training checkpoints carry among their ``params``). A pickle
that names anything else (``os.system``, a training class) is refused before any of it runs,
with a message naming the global and how to re-save the file as plain tensors.
"""

from __future__ import annotations

import io
import pathlib
import pickle
import re
from pathlib import Path
from typing import IO, Any

import torch

__all__ = ["UnsafeCheckpointError", "load_torch_checkpoint", "SAFE_GLOBALS"]

# Classes a checkpoint may name: constructing one only makes a value.
SAFE_GLOBALS: tuple[type, ...] = (pathlib.PosixPath, pathlib.PurePosixPath,
                                  pathlib.WindowsPath, pathlib.PureWindowsPath, pathlib.Path)

_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


class UnsafeCheckpointError(ValueError):
    """A pickled checkpoint names code to run; it was refused before anything ran."""


def load_torch_checkpoint(source: str | Path | bytes | IO[bytes], *, name: str | None = None
                          ) -> Any:
    """``torch.load`` of an untrusted file: tensors, containers and primitives only.

    ``source``: a path, the file's bytes, or a binary file object; ``name`` labels it in
    messages (default: the path).

    Raises:
        UnsafeCheckpointError: the pickle names a class or function outside the allow-list.
        ValueError: the file is not a torch checkpoint at all.
    """
    label = name or (str(source) if isinstance(source, (str, Path)) else "the checkpoint")
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        found = _GLOBAL.search(text)
        what = found.group(1) if found else None
        named = f" names {what}, which" if what else ""
        raise UnsafeCheckpointError(
            f"{label}{named} would run code when unpickled, so it was not loaded (checkpoints "
            "are read as tensors only). Re-save its tensors in an environment you trust, e.g. "
            "torch.save({'model': ckpt['model']}, 'pretrained.pt') (icefall's export.py writes "
            "that layout), or convert it to safetensors") from None
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - the unpickler raises anything on junk bytes
        raise ValueError(f"{label} is not a readable torch checkpoint "
                         f"({type(exc).__name__}: {exc})") from None
