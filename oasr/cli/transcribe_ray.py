"""``oasr transcribe --ray``: the flags checked, a cluster joined, the Ray Data run, a summary.

The run itself is :func:`oasr.integrations.ray.transcribe_parquet`; this module only turns the
command line into its arguments and refuses the flags a Ray run does not serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

# Flags of a single-process run that a Ray run does not serve, with the reason it says.
_REFUSED = {
    "gpus": "--gpus starts its own workers; Ray places actors itself (--ray-actors, --ray-gpus)",
    "shard": "--shard splits a run between processes; a Ray cluster splits it itself",
    "limit": "--limit counts rows in input order, which Ray Data does not keep",
    "retry_errors": "--retry-errors would rewrite finished parts; rerun the error ids "
                    "without --ray",
    "overwrite": "--overwrite is not served; remove the output folder to start over",
}


def check_ray_flags(cli: Any) -> None:
    """ValueError naming the first flag or input a Ray run cannot take."""
    for name, why in _REFUSED.items():
        if getattr(cli, name) not in (None, False):
            raise ValueError(f"--ray: {why}")
    if cli.output == "-":
        raise ValueError("--ray writes a folder of Parquet parts: give -o a folder, not '-'")
    if cli.fmt not in (None, "parquet"):
        raise ValueError(f"--ray writes Parquet parts; --format {cli.fmt} is not served "
                         "(convert the folder afterwards, or run without --ray)")
    out = Path(cli.output)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--ray writes a folder of Parquet parts; -o {out} is a file")
    for item in cli.inputs:
        path = Path(item)
        if path.is_file() and path.suffix.lower() == ".parquet":
            continue
        if path.is_dir() and any(path.rglob("*.parquet")):
            continue
        raise ValueError(f"--ray reads Parquet manifests (files, or folders of them); {item} is "
                         "not one")
    for name in ("ray_actors",):
        value = getattr(cli, name)
        if value is not None and value < 1:
            raise ValueError(f"--ray-actors must be >= 1, got {value}")
    for name in ("ray_gpus", "ray_cpus"):
        value = getattr(cli, name)
        if value is not None and value < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {value}")


def run_ray(console: Any, cli: Any, run: Any) -> None:
    """``--ray``: ``cli`` (:class:`~oasr.cli.transcribe.CliRun`) for where rows come from and go,
    ``run`` (:class:`~oasr.transcribe.options.RunOptions`) for every actor's session."""
    from rich.markup import escape

    def fail(exc: Exception, code: int = 2) -> typer.Exit:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        return typer.Exit(code)

    try:
        check_ray_flags(cli)
        from oasr.integrations.ray import connect, transcribe_parquet
    except (ValueError, ImportError) as exc:
        raise fail(exc) from None

    try:
        connected = connect(cli.ray)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise fail(ValueError(f"--ray {cli.ray}: cannot connect: {exc}")) from None
    import ray

    try:
        done = transcribe_parquet(
            list(cli.inputs), cli.output, columns=cli.columns, num_gpus=cli.ray_gpus,
            concurrency=cli.ray_actors, num_cpus=cli.ray_cpus, progress=cli.progress == "bar",
            options=run)
    except ValueError as exc:
        raise fail(exc) from None
    except ray.exceptions.RayError as exc:  # an actor failed: a model that does not load, ...
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise fail(RuntimeError(f"the Ray run failed: {last}; finished parts are kept in "
                                f"{cli.output}, rerun to resume"), 1) from None
    finally:
        if connected:
            ray.shutdown()
    for part in done.removed:
        console.print(f"note: removed {part}: an unreadable part (a run killed while writing "
                      "it); its rows were transcribed again", soft_wrap=True)
    if not cli.quiet:
        console.print(f"ray: {done.rows} rows written ({done.errors} errors), {done.skipped} "
                      f"already in the output, {done.wall_s:.1f} s -> {cli.output}",
                      soft_wrap=True, highlight=False)
    if cli.fail_on_error and done.errors:
        raise typer.Exit(1)
