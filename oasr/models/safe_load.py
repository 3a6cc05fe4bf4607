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

# Classes a checkpoint may name: constructing one only makes a value. A Windows path (and the
# names Python 3.13 pickles paths under) is read as the pure path it spells.
SAFE_GLOBALS: tuple[Any, ...] = (
    pathlib.PosixPath, pathlib.PurePosixPath, pathlib.PureWindowsPath,
    (pathlib.PureWindowsPath, "pathlib.WindowsPath"),
    (pathlib.PurePosixPath, "pathlib._local.PosixPath"),
    (pathlib.PurePosixPath, "pathlib._local.PurePosixPath"),
    (pathlib.PureWindowsPath, "pathlib._local.WindowsPath"),
    (pathlib.PureWindowsPath, "pathlib._local.PureWindowsPath"),
)

_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
# Opcodes that name a callable to import (a pickler other than torch.save writes these).
_CODE_OPCODES = {ord("i"): "INST", ord("o"): "OBJ", ord("c"): "GLOBAL", 0x93: "STACK_GLOBAL",
                 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4"}
_OPERAND = re.compile(r"Unsupported operand (\d+)")
_CODE_CALL = ("call reduce for unrecognized function", "Can only create new object")


def _names_code(text: str) -> str | None:
    """What in a refused pickle would run code (a phrase), or ``None`` if the error is about
    something else (bytes that are not a pickle at all)."""
    found = _GLOBAL.search(text)
    if found:
        return f"names {found.group(1)}, which"
    op = _OPERAND.search(text)
    if op and int(op.group(1)) in _CODE_OPCODES:
        return f"imports a callable ({_CODE_OPCODES[int(op.group(1))]} opcode), which"
    if any(phrase in text for phrase in _CODE_CALL):
        return "calls a class or function, which"
    return None


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
        what = _names_code(str(exc))
        if what is None:
            raise ValueError(f"{label} is not a readable torch checkpoint (it is not a pickle "
                             "torch.load reads); download or re-create the file") from None
        raise UnsafeCheckpointError(
            f"{label} {what} would run code when unpickled, so it was not loaded (checkpoints "
            "are read as tensors only). Re-save its tensors in an environment you trust, e.g. "
            "torch.save({'model': ckpt['model']}, 'pretrained.pt') (icefall's export.py writes "
            "that layout), or convert it to safetensors") from None
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - the unpickler raises anything on junk bytes
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ValueError(f"{label} is not a readable torch checkpoint ({reason}); download or "
                         "re-create the file") from None
