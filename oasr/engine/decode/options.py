"""Per-family options: one dataclass per decode family, reached as ``--decode-option k=v``.

Declare a field with ``option(default, doc=...)``. Resolution order is the dataclass defaults,
then ``EngineConfig.decode_options``; an unknown key raises naming the valid ones. A ``k=v`` string
is typed from the field's annotation (``Optional[int]`` takes ``4`` as the int and ``none`` as
``None``); a type a string cannot spell is refused by name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

__all__ = ["option", "option_docs", "resolve_options", "parse_decode_option", "coerce_option"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def option(default: Any, *, doc: str) -> Any:
    """A documented options-dataclass field."""
    meta = {"doc": doc}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def option_docs(options_cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(options_cls)}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def coerce_option(options_cls: type, key: str, value: Any) -> Any:
    """Convert ``value`` (a string from the command line, or a Python value) to ``key``'s type."""
    hints = typing.get_type_hints(options_cls)
    names = [f.name for f in dataclasses.fields(options_cls)]
    if key not in names:
        raise KeyError(
            f"unknown decode option {key!r} for {options_cls.__name__}; valid: {', '.join(names)}"
        )
    tp, optional = _unwrap_optional(hints[key])
    if not isinstance(value, str) or tp is str:
        return _check_value(key, hints[key], tp, optional, value)
    text = value.strip()
    if optional and text.lower() in ("none", "null"):
        return None
    if tp is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"decode option {key}={value!r}: expected a boolean (true/false/1/0)")
    if tp in (int, float, str):
        try:
            return tp(text)
        except ValueError as exc:
            raise ValueError(f"decode option {key}={value!r}: expected {tp.__name__}") from exc
    origin = typing.get_origin(tp)
    if origin in (tuple, list) and typing.get_args(tp):
        inner = typing.get_args(tp)[0]
        if inner in (int, float, str):
            items = [inner(p) for p in text.split(",") if p.strip()]
            return tuple(items) if origin is tuple else items
    raise ValueError(
        f"decode option {key!r} of type {hints[key]} cannot be set from a string"
    )


def _check_value(key: str, hint: Any, tp: Any, optional: bool, value: Any) -> Any:
    """A Python value for ``key``, checked against its annotation (an int field takes an int,
    a float field an int or a float, never a bool); returned converted where lossless."""
    def refuse() -> ValueError:
        return ValueError(f"decode option {key}={value!r}: expected {hint}, got "
                          f"{type(value).__name__}")

    if value is None:
        if optional:
            return None
        raise refuse()
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise refuse()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise refuse()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise refuse()
    if tp is str:
        if isinstance(value, str):
            return value
        raise refuse()
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if not isinstance(value, (tuple, list)):
            raise refuse()
        if len(args) == 1:
            items = [_check_value(key, hint, args[0], False, v) for v in value]
            return tuple(items) if origin is tuple else items
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise refuse()
    return value


def parse_decode_option(text: str) -> tuple[str, str]:
    """Split ``"k=v"``; the value stays a string until the family's dataclass types it."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--decode-option {text!r}: expected key=value")
    return key.strip(), value


def resolve_options(options_cls: type | None, overrides: dict[str, Any] | None = None) -> Any:
    """Build the family's options: the dataclass defaults, then ``overrides``."""
    overrides = dict(overrides or {})
    if options_cls is None:
        if overrides:
            raise KeyError(
                f"this decode family takes no options, got {', '.join(sorted(overrides))}"
            )
        return None
    values = {key: coerce_option(options_cls, key, value) for key, value in overrides.items()}
    opts = options_cls(**values)
    if isinstance(opts, ValidatedOptions):
        opts.validate()
    return opts


@typing.runtime_checkable
class ValidatedOptions(typing.Protocol):
    """An options dataclass that checks its values together once they are resolved."""

    def validate(self) -> None: ...
