"""faster-whisper's decoding flags (``--beam-size``, ``--temperature``, ...) mapped onto the
decode family's options and the runner's temperature fallback, and ``-d help``.

Each flag is a spelling of something that already exists: ``--beam-size`` is the family option
``beam_size`` (an error on a family without one), ``--temperature`` the per-request sampling
temperature, a comma list of them Whisper's fallback schedule (``oasr.transcribe.fallback``),
``--threads`` torch's CPU threads.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

__all__ = ["apply_beam_size", "family_options_table", "format_family_options",
           "parse_temperatures", "print_family_options", "set_threads"]


def parse_temperatures(text: str) -> tuple[float, ...]:
    """``"0"`` -> (0.0,); ``"0,0.2,0.4"`` -> the fallback schedule."""
    try:
        temps = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ValueError(f"--temperature {text!r}: expected a number or a comma list such as "
                         "0,0.2,0.4,0.6,0.8,1.0") from None
    if not temps or any(t < 0 for t in temps):
        raise ValueError(f"--temperature {text!r}: temperatures must be >= 0")
    return temps


def apply_beam_size(overrides: dict[str, Any], beam_size: int | None) -> None:
    """``--beam-size N`` as the family option ``beam_size`` (``-d beam_size=`` wins if both)."""
    if beam_size is None:
        return
    if beam_size < 1:
        raise ValueError(f"--beam-size must be >= 1, got {beam_size}")
    overrides.setdefault("beam_size", str(beam_size))


def set_threads(threads: int | None) -> None:
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def family_options_table() -> list[dict[str, str]]:
    """Every registered decode family's options: family, name, type, default, doc."""
    from oasr.engine.decode.registry import DECODE_STRATEGIES

    rows = []
    for family in DECODE_STRATEGIES.names():
        cls = DECODE_STRATEGIES.get(family).options_cls
        if cls is None:
            rows.append({"family": family, "option": "(none)", "type": "", "default": "",
                         "doc": "this family takes no options"})
            continue
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = ""
            rows.append({"family": family, "option": f.name, "type": _type_name(hints[f.name]),
                         "default": repr(default), "doc": f.metadata.get("doc", "")})
    return rows


def format_family_options(width: int) -> str:
    """``-d help`` as text wrapped to ``width`` columns: per family, each option as
    ``name: type = default`` with its doc indented beneath."""
    from oasr.cli.help_format import wrap

    lines = ["Decode options, per family: -d NAME=VALUE (repeatable)."]
    family = None
    for r in family_options_table():
        if r["family"] != family:
            family = r["family"]
            lines += ["", f"{family}:"]
        if r["option"] == "(none)":
            lines += wrap(r["doc"], width, 2)
            continue
        lines.append(f"  {r['option']}: {r['type']} = {r['default']}")
        lines += wrap(r["doc"], width, 6)
    return "\n".join(lines)


def print_family_options() -> None:
    """``-d help``: every family's options, to stdout, wrapped to the terminal (at most 100
    columns)."""
    import shutil

    width = min(shutil.get_terminal_size().columns, 100)
    print(format_family_options(width))
