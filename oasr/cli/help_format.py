"""How every ``oasr`` command prints its help: readable at 80 columns.

Typer's defaults print a parameter's type as its Python annotation (``<str>``, ``<list[str]>``,
an argument as ``{inputs}...``), cut long option names in the Rich table and squeeze the help
into what the other columns leave. ``OasrCommand`` (every command's class, ``oasr/cli/app.py``)
prints click's plain two columns instead: an option's names are never cut (a long one puts its
help on the next line), the help wraps between words and never inside an option name such as
``--fail-on-error``, and every value has a named metavar: the one the option declares, else its
type's (``TEXT``, ``INT``, ``FLOAT``, ``PATH``, ``FILE``, ``DIR``, the choices ``a|b``, a list
or a repeatable option its item's), an argument its own name (``INPUTS...``).
"""

from __future__ import annotations

import inspect
import textwrap
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from typer.core import TyperArgument, TyperCommand

__all__ = ["OasrCommand", "type_metavar", "wrap"]

NAME_COLUMN_MAX = 30  # wider option names put their help on the next line
_TYPE_NAMES = {str: "TEXT", int: "INT", float: "FLOAT", bool: "BOOL", Path: "PATH"}
_PATH_NAMES = {"file": "FILE", "directory": "DIR", "dir": "DIR"}


def _label(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _label(args[0])  # Optional[X]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "|".join(str(m.value) for m in annotation)
    if annotation in _TYPE_NAMES:
        return _TYPE_NAMES[annotation]
    raise TypeError(f"no metavar for a parameter of type {annotation!r}; declare one "
                    "(typer.Option(..., metavar='NAME')) or add the type to _TYPE_NAMES")


def type_metavar(param: Any) -> str:
    """The metavar a parameter's declared type gives it (see the module doc)."""
    desc = param.type_descriptor
    if desc.is_choice:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    annotation = desc.annotation
    if desc.is_path:
        return _PATH_NAMES.get(desc.path_type, "PATH")
    if desc.is_tuple:
        return " ".join(_label(a) for a in typing.get_args(annotation))
    if desc.is_list:
        (annotation,) = typing.get_args(annotation)
    return _label(annotation)


def wrap(text: str, width: int, indent: int = 0) -> list[str]:
    """``text`` wrapped to ``width`` columns between words (never at a hyphen, never inside a
    word), paragraphs kept; a paragraph led by a ``\\b`` line is printed as written."""
    pad = " " * indent
    wrapper = textwrap.TextWrapper(max(width, indent + 20), initial_indent=pad,
                                   subsequent_indent=pad, break_on_hyphens=False,
                                   break_long_words=False)
    lines: list[str] = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        if lines:
            lines.append("")
        if paragraph.startswith("\b\n"):
            lines += [pad + line for line in paragraph[2:].splitlines()]
        else:
            lines += wrapper.wrap(" ".join(paragraph.split()))
    return lines


class OasrCommand(TyperCommand):
    """A Typer command whose help reads well at 80 columns (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["rich_markup_mode"] = None  # click's plain columns, wrapped here
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is not None:
                continue
            if isinstance(param, TyperArgument):
                param.metavar = param.name.upper()
            elif not (param.is_flag or param.count):
                param.metavar = type_metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                piece = param.metavar if param.required else f"[{param.metavar}]"
                pieces.append(piece + ("..." if param.nargs != 1 else ""))
        return pieces

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        text = inspect.cleandoc(self.help or "").partition("\f")[0]
        if self.deprecated:
            text = f"(Deprecated) {text}"
        if text:
            formatter.write_paragraph()
            formatter.write("\n".join(wrap(text, formatter.width, formatter.current_indent + 2))
                            + "\n")

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if isinstance(param, TyperArgument):
                name = param.metavar + ("..." if param.nargs != 1 else "")
                arguments.append((name, record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    _write_rows(formatter, rows)


def _write_rows(formatter: Any, rows: list[tuple[str, str]]) -> None:
    """A definition list: names in the first column (whole), help wrapped beside them."""
    indent = formatter.current_indent
    column = min(max(len(name) for name, _ in rows), NAME_COLUMN_MAX) + 2
    for name, text in rows:
        help_lines = wrap(text, formatter.width, indent + column) if text else []
        first = " " * indent + name
        if help_lines and len(name) <= column - 2:
            formatter.write(first.ljust(indent + column) + help_lines[0].lstrip() + "\n")
            help_lines = help_lines[1:]
        else:
            formatter.write(first + "\n")
        for line in help_lines:
            formatter.write(line + "\n")
