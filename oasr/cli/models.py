"""``oasr models``: the models a user can name with ``--model``, and the registered
architectures they load as."""

from __future__ import annotations

import json

import typer


def models_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """List runnable models (installed or not, with how to get them) and the registered
    architectures with their decode families, modes and source formats."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from oasr.models.catalog import CATALOG
    from oasr.models.registry import list_models

    models = [
        {
            "name": e.name,
            "aliases": list(e.aliases),
            "architecture": e.architecture,
            "languages": "multilingual" if e.multilingual else "en",
            "installed": e.installed(),
            "status": e.status(),
            "how_to_get": "" if e.installed() else e.install_hint(),
            "hub_id": e.hub_id,
            "packages": list(e.packages),
            "description": e.description,
        }
        for e in CATALOG
    ]
    architectures = [
        {
            "architecture": e.name,
            "decode_families": list(e.decode_families),
            "modes": list(e.modes),
            "source_formats": list(e.source_formats),
            "description": e.description,
        }
        for e in list_models()
    ]
    if as_json:
        typer.echo(json.dumps({"models": models, "architectures": architectures}, indent=2))
        return
    console = Console()
    table = Table(title="models (--model NAME)")
    table.add_column("name", no_wrap=True)
    for col in ("aliases", "languages", "status", "Hub id"):
        table.add_column(col, overflow="fold")
    for m in models:
        table.add_row(m["name"], ", ".join(m["aliases"]), m["languages"],
                      escape(m["status"]), m["hub_id"])
    console.print(table)
    console.print("Hub-only models are fetched on first use where the Hub is reachable. "
                  "--model also takes a bundle or checkpoint folder, an installed model "
                  "package or any Hub id (org/name).")
    if not architectures:
        console.print("no architectures are registered")
        return
    table = Table(title="registered architectures")
    for col in ("architecture", "decode families", "modes", "source formats", "description"):
        table.add_column(col, overflow="fold")
    for r in architectures:
        table.add_row(r["architecture"], ", ".join(r["decode_families"]), ", ".join(r["modes"]),
                      ", ".join(r["source_formats"]), r["description"])
    console.print(table)
