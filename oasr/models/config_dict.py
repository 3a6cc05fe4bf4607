"""``DictConfig``: the JSON-dict round trip every model config shares (a bundle's
``model_config``).

``to_dict`` is ``dataclasses.asdict`` (nested dataclasses become dicts, containers are copied)
with enums written as their values and the tuples inside a ``list``-typed field written as
lists, so the dict is what ``json`` writes and reads back. ``from_dict`` refuses a field the
class does not have (a bundle from another model, or a typo, is an error, never dropped) and
turns what JSON gives back into the declared types: a nested dataclass from its dict, an enum
from its value, a ``tuple`` field from a list, and the elements of a ``list`` / ``tuple`` /
``dict`` field to their declared scalar type (JSON object keys are strings). Top-level scalars
are passed through as read, for the config's ``__post_init__`` to check.

A config refusing bundles written before it recorded something overrides ``check_recorded``.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from functools import cache
from typing import Any, TypeVar

__all__ = ["DictConfig"]

_T = TypeVar("_T", bound="DictConfig")
_SCALARS = (int, float, str)


class DictConfig:
    """Mixin of a ``@dataclass`` config: ``to_dict`` / ``from_dict`` (see the module)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field."""
        out = dataclasses.asdict(self)  # type: ignore[call-overload]
        hints = _field_types(type(self))
        return {name: _plain(value, listed=typing.get_origin(hints[name]) is list)
                for name, value in out.items()}

    @classmethod
    def check_recorded(cls, data: dict[str, Any]) -> None:
        """Refuse a dict written before this config recorded what it needs (default: accept)."""

    @classmethod
    def from_dict(cls: type[_T], data: dict[str, Any]) -> _T:
        hints = _field_types(cls)
        unknown = sorted(set(data) - set(hints))
        if unknown:
            raise ValueError(f"{cls.__name__} does not have the fields: {', '.join(unknown)}")
        cls.check_recorded(data)
        return cls(**{name: _typed(value, hints[name], top=True) for name, value in data.items()})


@cache
def _field_types(cls: type) -> dict[str, Any]:
    """Each init field of dataclass ``cls`` and its resolved annotation."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _plain(value: Any, listed: bool) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v, listed) for k, v in value.items()}
    if isinstance(value, list) or (listed and isinstance(value, tuple)):
        return [_plain(v, listed) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v, listed) for v in value)
    return value


def _typed(value: Any, hint: Any, top: bool = False) -> Any:
    """``value`` as read from JSON, in the declared type ``hint`` where that is unambiguous."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        real = [a for a in args if a is not type(None)]
        return _typed(value, real[0], top) if len(real) == 1 else value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        if issubclass(hint, DictConfig):
            return hint.from_dict(value)
        return hint(**value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if origin is list and isinstance(value, (list, tuple)):
        return [_typed(v, args[0]) for v in value] if args else list(value)
    if origin is tuple and isinstance(value, (list, tuple)):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(v, args[0]) for v in value)
        if args and len(args) == len(value):
            return tuple(_typed(v, a) for v, a in zip(value, args, strict=True))
        return tuple(value)
    if origin is dict and isinstance(value, dict) and args:
        return {_typed(k, args[0]): _typed(v, args[1]) for k, v in value.items()}
    if not top and hint in _SCALARS and not isinstance(value, bool):
        return hint(value)  # an element JSON gave back as another scalar (an object key)
    return value
