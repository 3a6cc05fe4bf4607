"""``oasr gaps``: the kernel-gap report, of this process or of a short workload (``--run``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def compiled_modules() -> dict[str, str]:
    """The compiled kernel modules importable here: name -> state."""
    import importlib

    found: dict[str, str] = {}
    try:
        importlib.import_module("oasr._C")
        found["oasr._C"] = "built"
    except ImportError as exc:
        found["oasr._C"] = f"not built ({exc.__class__.__name__})"
    from oasr.kernels import jit
    from oasr.ops import LIBRARIES

    for name in LIBRARIES:
        found[f"cuda:{name}"] = jit.library_state(name)
    return found


def run_workload(manifest: str, model: str, device: str, dtype: str, limit: int,
                 batch_size: int) -> dict[tuple[str, str], int]:
    """Transcribe the first ``limit`` rows of ``manifest`` as ``oasr transcribe`` does (into a
    throwaway output) and return what that run dispatched."""
    import tempfile

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.io import open_writer
    from oasr.transcribe.runner import TranscribeOptions, transcribe

    engine = ASREngine(EngineConfig(model=model, device=device, dtype=dtype,
                                    max_batch_size=batch_size))
    with tempfile.TemporaryDirectory(prefix="oasr-gaps-") as tmp:
        writer = open_writer(Path(tmp) / "gaps.jsonl", "jsonl")
        stats = transcribe(engine, TranscribeOptions(inputs=[manifest], limit=limit), writer)
    return stats.dispatch


def gaps_command(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    run: str | None = typer.Option(
        None, "--run", metavar="MANIFEST",
        help="A manifest (or audio files/glob): transcribe its first --limit rows "
        "and report what that run dispatched."),
    model: str = typer.Option("", "--model", "-m", help="--run: the model (default: the "
                              "packaged Whisper tiny.en)."),
    device: str = typer.Option("auto", help="--run: auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", help="--run: auto, fp32, fp16, bf16."),
    limit: int = typer.Option(8, min=1, help="--run: rows to transcribe."),
    batch_size: int = typer.Option(8, "--batch-size", "-b", min=1, help="--run: rows per batch."),
) -> None:
    """Show the kernel-gap report: backend, declared gaps, kernels, compiled modules, device;
    with --run, the calls of a short workload by case."""
    import oasr.kernels  # noqa: F401  (declares the in-tree kernels and their gaps, torch-free)
    from oasr import envs, ops
    from oasr.cli.device_probe import device_summary

    counts = None
    if run is not None:
        try:
            counts = run_workload(run, model, device, dtype, limit, batch_size)
        except (ValueError, KeyError, FileNotFoundError, RuntimeError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    report: dict[str, Any] = ops.gap_report(counts)
    report["compiled_modules"] = compiled_modules()
    report["device"] = device_summary()
    report["env"] = {v.name: v.get() for v in envs.RUNTIME}
    if counts is not None:
        report["run"] = {"manifest": run, "limit": limit, "model": model or "default",
                         "dispatch": ops.dispatch_summary(counts)}
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    _print(report, None if counts is None else ops.format_dispatch_line(counts))


def _print(report: dict[str, Any], run_line: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    dev = report["device"]
    console.print(f"[bold]backend[/]: {report['backend']}    [bold]device[/]: {dev['device']}"
                  + (f" ({dev['capability']}, CUDA {dev['cuda_version']})" if dev["cuda"]
                     else f" ({dev['why']})"))
    table = Table(title="declared kernel gaps (in scope, no kernel)")
    for col in ("id", "missing", "fix", "calls"):
        table.add_column(col, overflow="fold")
    for g in report["declared_gaps"]:
        table.add_row(g["id"], g["what"], g["fix"], str(g["calls"]))
    console.print(table)
    console.print("[bold]registered kernels[/]:")
    for k in report["kernels"] or [{"op": "none yet", "state": "", "source": ""}]:
        console.print(f"  {k['op']}: {k['state']} ({k['source']})")
    console.print("[bold]compiled kernel modules[/]:")
    for m, state in report["compiled_modules"].items():
        console.print(f"  {m}: {state}")
    calls = report["calls"]
    where = "this run" if run_line is not None else "this process"
    if calls:
        ct = Table(title=f"calls by case ({where})")
        for col in ("case", "key", "calls"):
            ct.add_column(col)
        for kind, keys in calls.items():
            for key, n in keys.items():
                ct.add_row(kind, key, str(n))
        console.print(ct)
    else:
        console.print(f"no routed calls recorded in {where} (--run MANIFEST runs a workload)")
    if run_line is not None:
        console.print(run_line, soft_wrap=True)
