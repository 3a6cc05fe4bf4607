"""``oasr models``: the registered architectures."""

from __future__ import annotations

import json

import typer


def models_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the registered architectures with their decode families, modes and source formats."""
    from rich.console import Console
    from rich.table import Table

    from oasr.models.registry import list_models

    entries = list_models()
    rows = [
        {
            "architecture": e.name,
            "decode_families": list(e.decode_families),
            "modes": list(e.modes),
            "source_formats": list(e.source_formats),
            "description": e.description,
        }
        for e in entries
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    console = Console()
    if not rows:
        console.print("no architectures are registered")
        return
    table = Table(title="registered architectures")
    for col in ("architecture", "decode families", "modes", "source formats", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["architecture"], ", ".join(r["decode_families"]), ", ".join(r["modes"]),
                      ", ".join(r["source_formats"]), r["description"])
    console.print(table)
