"""``oasr gaps``: the kernel-gap report."""

from __future__ import annotations

import json

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

    for name in jit.LIBRARIES:
        found[f"cuda:{name}"] = jit.library_state(name)
    return found


def device_summary() -> dict[str, object]:
    import torch

    if not torch.cuda.is_available():
        return {"cuda": False, "device": "cpu", "torch": torch.__version__}
    idx = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    return {
        "cuda": True,
        "device": torch.cuda.get_device_name(idx),
        "capability": f"sm_{major}{minor}",
        "torch": torch.__version__,
        "cuda_version": torch.version.cuda,
    }


def gaps_command(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Show the kernel-gap report: backend, declared gaps, kernels, compiled modules, device."""
    from rich.console import Console
    from rich.table import Table

    import oasr.kernels.ctc_cuda  # noqa: F401  (their gaps and kernels declare themselves)
    import oasr.kernels.features_cuda  # noqa: F401
    import oasr.kernels.paged_attention  # noqa: F401
    import oasr.layers  # noqa: F401  (declares the built-in gaps)
    from oasr import envs
    from oasr.layers import _backend

    report = _backend.gap_report()
    report["compiled_modules"] = compiled_modules()
    report["device"] = device_summary()
    report["env"] = {v.name: v.get() for v in envs.ALL}
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return

    console = Console()
    dev = report["device"]
    console.print(f"[bold]backend[/]: {report['backend']}    [bold]device[/]: {dev['device']}"
                  + (f" ({dev['capability']}, CUDA {dev['cuda_version']})" if dev["cuda"] else ""))
    table = Table(title="declared kernel gaps (in scope: CUDA fp16/bf16, no kernel)")
    for col in ("id", "missing", "fix", "calls"):
        table.add_column(col, overflow="fold")
    for g in report["declared_gaps"]:
        table.add_row(g["id"], g["what"], g["fix"], str(g["calls"]))
    console.print(table)
    kernels = report["kernels"]
    console.print("[bold]registered kernels[/]: "
                  + (", ".join(k["op"] for k in kernels) if kernels else "none yet"))
    mods = report["compiled_modules"]
    console.print("[bold]compiled kernel modules[/]:")
    for m, state in mods.items():
        console.print(f"  {m}: {state}")
    calls = report["calls"]
    if calls:
        ct = Table(title="calls by case (this process)")
        for col in ("case", "key", "calls"):
            ct.add_column(col)
        for kind, keys in calls.items():
            for key, n in keys.items():
                ct.add_row(kind, key, str(n))
        console.print(ct)
    else:
        console.print("no layer calls recorded in this process (run a workload to count them)")
