"""One small registry used by every extension axis.

Each axis (architectures, decode strategies, streaming backends, batching and partition
policies, tokenizers, feature extractors, speech detectors, quantization methods) owns one
``Registry``. Entries are either objects or lazy ``"module:attribute"`` strings imported on first
use, as vLLM's model registry does, so ``import oasr`` stays cheap and an axis with many entries
costs nothing until one is asked for. Out-of-tree entries arrive through an entry-point group,
also loaded lazily, on the first lookup or listing.

Loud errors are the point: a duplicate name raises, an unknown name raises listing the valid
ones.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "RegistryError", "DuplicateNameError", "UnknownNameError",
           "import_target"]


class RegistryError(Exception):
    """Base class for registry errors."""


class DuplicateNameError(RegistryError, ValueError):
    pass


class UnknownNameError(RegistryError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence
        return str(self.args[0]) if self.args else ""


def import_target(target: str) -> Any:
    """``"module:attr"`` -> that attribute (``"module"`` -> the module), imported now."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


class Registry(Generic[T]):
    """A named table of one axis' implementations.

    Args:
        axis: what the entries are, used in error messages ("decode strategy").
        entry_point_group: an ``importlib.metadata`` group whose entry points are loaded once,
            lazily, before the first lookup or listing. Loading an entry point is expected to
            register into this registry (or into the registry the group belongs to).
    """

    def __init__(self, axis: str, entry_point_group: str | None = None) -> None:
        self.axis = axis
        self.entry_point_group = entry_point_group
        self._entries: dict[str, T | str] = {}
        self._origins: dict[str, str] = {}  # as registered, before a lazy entry is imported
        self._entry_points_loaded = entry_point_group is None
        self._lock = threading.RLock()

    # -- registration -------------------------------------------------------------------
    def register(self, name: str, obj: T | str | None = None) -> Any:
        """Register ``obj`` (or a lazy ``"module:attr"`` string) under ``name``.

        A lazy string is imported on the first lookup, so it must come from code (a module
        registering its own entries, an installed entry point), never from a file: names read
        from checkpoints and bundles are only ever *looked up* in a registry.

        Without ``obj`` it returns a decorator, so ``@REGISTRY.register("name")`` works on
        classes and functions.
        """
        if obj is None:

            def decorator(target: T) -> T:
                self._add(name, target)
                return target

            return decorator
        self._add(name, obj)
        return obj

    def _add(self, name: str, obj: T | str) -> None:
        if not isinstance(name, str) or not name:
            raise RegistryError(f"a {self.axis} name must be a non-empty string, got {name!r}")
        with self._lock:
            if name in self._entries:
                raise DuplicateNameError(
                    f"{self.axis} {name!r} is already registered "
                    f"(by {self._describe(self._entries[name])}); pick another name or "
                    f"unregister the first one"
                )
            self._entries[name] = obj
            self._origins[name] = self._describe(obj)

    def unregister(self, name: str) -> None:
        with self._lock:
            if name not in self._entries:
                raise self._unknown(name)
            del self._entries[name]
            del self._origins[name]

    # -- lookup -------------------------------------------------------------------------
    def get(self, name: str) -> T:
        self._load_entry_points()
        with self._lock:
            if name not in self._entries:
                raise self._unknown(name)
            entry = self._entries[name]
            if isinstance(entry, str):
                entry = import_target(entry)
                self._entries[name] = entry
            return entry  # type: ignore[return-value]

    def names(self) -> list[str]:
        self._load_entry_points()
        with self._lock:
            return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        for name in self.names():
            yield name, self.get(name)

    def origin(self, name: str) -> str:
        """Where ``name``'s entry is defined, whether imported yet or not: the ``"module:attr"``
        string it was registered by, or ``module.qualname`` of a registered object."""
        self._load_entry_points()
        with self._lock:
            if name not in self._origins:
                raise self._unknown(name)
            return self._origins[name]

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._entries

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.axis!r}, {sorted(self._entries)})"

    # -- internals ----------------------------------------------------------------------
    def _unknown(self, name: str) -> UnknownNameError:
        valid = sorted(self._entries)
        listing = ", ".join(valid) if valid else "none are registered"
        return UnknownNameError(f"unknown {self.axis} {name!r}; valid: {listing}")

    @staticmethod
    def _describe(obj: Any) -> str:
        if isinstance(obj, str):
            return obj
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        return f"{module}.{qualname}" if module else qualname

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        with self._lock:
            if self._entry_points_loaded:
                return
            self._entry_points_loaded = True
            for ep in _entry_points(self.entry_point_group):
                loaded = ep.load()
                if callable(loaded) and getattr(loaded, "__oasr_plugin__", False):
                    loaded()


_entry_point_index: dict[str, list[Any]] | None = None
_index_lock = threading.Lock()


def _entry_points(group: str) -> list[Any]:
    """The installed entry points of ``group``. Every distribution's metadata is read once per
    process, for all groups together: a scan per registry costs tens of milliseconds each in a
    large environment, at every start-up."""
    global _entry_point_index
    with _index_lock:
        if _entry_point_index is None:
            found: Any = metadata.entry_points()
            if isinstance(found, dict):  # Python < 3.12: group -> its entry points (the dict
                # methods of that class warn; the plain dict's do not)
                found = [ep for group in dict.values(found) for ep in group]
            index: dict[str, list[Any]] = {}
            for ep in found:
                index.setdefault(ep.group, []).append(ep)
            _entry_point_index = index
        return list(_entry_point_index.get(group, []))


def plugin(fn: Callable[[], None]) -> Callable[[], None]:
    """Mark a function an entry point should call on load (instead of only importing it)."""
    fn.__oasr_plugin__ = True  # type: ignore[attr-defined]
    return fn
