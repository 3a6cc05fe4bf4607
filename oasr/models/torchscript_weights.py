"""The tensors of a TorchScript archive (``torch.jit.save``), read without running its code.

``torch.jit.load`` compiles the archive's ``code/`` and runs it (its ``__setstate__`` methods
included); ``torch.load(weights_only=True)`` refuses such archives. The tensors, though, are
plain: ``data.pkl`` describes the module tree as objects of ``__torch__.*`` classes whose state
is a dict of attributes, and each tensor's bytes are a stored record ``data/<key>``. This module
unpickles ``data.pkl`` with a ``find_class`` that answers only those names (a ``__torch__``
class becomes an inert attribute holder, never its code) and refuses every other global, then
returns each tensor under its attribute path (``_model.encoder.0.reparam_conv.weight``), which
is what ``torch.jit.load(path).state_dict()`` names the parameters and buffers.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from oasr.models.contained import is_contained_name
from oasr.models.safe_load import UnsafeCheckpointError

__all__ = ["load_torchscript_tensors"]

_STORAGES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64,
             "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
             "LongStorage": torch.int64, "IntStorage": torch.int32, "ShortStorage": torch.int16,
             "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool}
_LIST_BUILDERS = ("build_intlist", "build_doublelist", "build_boollist", "build_tensorlist",
                  "build_genericlist")
_PICKLE_MAX_BYTES = 64 << 20
_MAX_DEPTH = 64


class _Refused(ValueError):
    """A record or structure of the archive this reader will not take (the message names it)."""


class _ScriptObject:
    """A TorchScript object's state, kept as data; its class's code is never compiled."""

    state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _StorageType:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


def _keep_value(value: Any, _type_tag: Any) -> Any:
    return value


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, root: str, label: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive, self.root, self.label = archive, root, label
        self.storages: dict[str, torch.Tensor] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("__torch__.") or module == "__torch__":
            return _ScriptObject
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch" and name in _STORAGES:
            return _StorageType(_STORAGES[name])
        if module == "torch.jit._pickle" and name in _LIST_BUILDERS:
            return list
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return _keep_value
        raise UnsafeCheckpointError(
            f"{self.label} names {module}.{name}, which would run code when unpickled, so it "
            "was not loaded (its tensors are read as data only); re-save the weights as "
            "safetensors where the file is trusted")

    def persistent_load(self, pid: Any) -> torch.Tensor:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
                and isinstance(pid[4], int) and pid[4] >= 0 and is_contained_name(pid[2])):
            raise _Refused(f"{self.label}: a tensor reference {pid!r} is not a storage record")
        _, kind, key, _, numel = pid
        if key not in self.storages:
            self.storages[key] = self._storage(key, kind.dtype, numel)
        return self.storages[key]

    def _storage(self, key: str, dtype: torch.dtype, numel: int) -> torch.Tensor:
        name = f"{self.root}/data/{key}"
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise _Refused(f"{self.label} has no record {name}") from None
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != nbytes:
            raise _Refused(f"{self.label}: record {name} holds {info.file_size} bytes "
                             f"(compression {info.compress_type}), not the {nbytes} its tensor "
                             "declares")
        if nbytes == 0:
            return torch.empty(0, dtype=dtype)
        return torch.frombuffer(bytearray(self.archive.read(name)), dtype=dtype)


def _rebuild_tensor(storage: torch.Tensor, offset: int, size: tuple[int, ...],
                    stride: tuple[int, ...], *_: Any) -> torch.Tensor:
    # set_ checks the view against the storage: a crafted size cannot read past it.
    return torch.empty(0, dtype=storage.dtype).set_(storage.untyped_storage(), offset, size,
                                                    stride)


def _collect(obj: Any, prefix: str, out: dict[str, torch.Tensor], depth: int) -> None:
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, _ScriptObject) and isinstance(obj.state, dict) and depth < _MAX_DEPTH:
        for key, value in obj.state.items():
            if isinstance(key, str):
                _collect(value, f"{prefix}.{key}" if prefix else key, out, depth + 1)


def load_torchscript_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor attribute of the archive's module tree, by dotted attribute path.

    Raises:
        UnsafeCheckpointError: ``data.pkl`` names a global other than TorchScript classes,
            tensors, storages and list builders.
        ValueError: not a TorchScript archive, or a record that does not match its tensor.
    """
    path = Path(path)
    label = str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            roots = [n[: -len("/data.pkl")] for n in archive.namelist()
                     if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(roots) != 1:
                raise _Refused(f"{label} is not a TorchScript archive (no single data.pkl)")
            info = archive.getinfo(f"{roots[0]}/data.pkl")
            if info.file_size > _PICKLE_MAX_BYTES:
                raise _Refused(f"{label}: data.pkl holds {info.file_size} bytes; too large")
            data = archive.read(info)
            root_object = _Unpickler(data, archive, roots[0], label).load()
    except (UnsafeCheckpointError, _Refused):
        raise
    except (zipfile.BadZipFile, OSError, EOFError, pickle.UnpicklingError, RuntimeError,
            TypeError, ValueError, AttributeError, IndexError, KeyError,
            RecursionError) as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ValueError(f"{label} is not a readable TorchScript archive ({reason}); download "
                         "or re-create the file") from None
    out: dict[str, torch.Tensor] = {}
    _collect(root_object, "", out, 0)
    return out
