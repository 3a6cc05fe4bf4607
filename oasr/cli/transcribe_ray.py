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


def check_ray_flags(flags: Any) -> None:
    """ValueError naming the first flag or input a Ray run cannot take."""
    for name, why in _REFUSED.items():
        if getattr(flags, name) not in (None, False):
            raise ValueError(f"--ray: {why}")
    if flags.output == "-":
        raise ValueError("--ray writes a folder of Parquet parts: give -o a folder, not '-'")
    if flags.fmt not in (None, "parquet"):
        raise ValueError(f"--ray writes Parquet parts; --format {flags.fmt} is not served "
                         "(convert the folder afterwards, or run without --ray)")
    out = Path(flags.output)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--ray writes a folder of Parquet parts; -o {out} is a file")
    for item in flags.inputs:
        path = Path(item)
        if path.is_file() and path.suffix.lower() == ".parquet":
            continue
        if path.is_dir() and any(path.rglob("*.parquet")):
            continue
        raise ValueError(f"--ray reads Parquet manifests (files, or folders of them); {item} is "
                         "not one")
    for name in ("ray_actors",):
        value = getattr(flags, name)
        if value is not None and value < 1:
            raise ValueError(f"--ray-actors must be >= 1, got {value}")
    for name in ("ray_gpus", "ray_cpus"):
        value = getattr(flags, name)
        if value is not None and value < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {value}")


def run_ray(console: Any, flags: Any) -> None:
    from rich.markup import escape

    from oasr.cli.decoding_flags import apply_beam_size, parse_temperatures
    from oasr.engine.decode.options import parse_decode_option
    from oasr.io import ColumnMap

    def fail(exc: Exception, code: int = 2) -> typer.Exit:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        return typer.Exit(code)

    try:
        check_ray_flags(flags)
        overrides = dict(parse_decode_option(o) for o in flags.decode_option)
        apply_beam_size(overrides, flags.beam_size)
        temperatures = parse_temperatures(flags.temperature)
        from oasr.integrations.ray import connect, transcribe_parquet
    except (ValueError, ImportError) as exc:
        raise fail(exc) from None

    try:
        connected = connect(flags.ray)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise fail(ValueError(f"--ray {flags.ray}: cannot connect: {exc}")) from None
    import ray

    try:
        run = transcribe_parquet(
            list(flags.inputs), flags.output, flags.model,
            columns=ColumnMap(id=flags.id_column, audio=flags.audio_column,
                              text=flags.text_column),
            num_gpus=flags.ray_gpus, concurrency=flags.ray_actors, num_cpus=flags.ray_cpus,
            progress=flags.progress, device=flags.device, dtype=flags.dtype,
            batch_size=flags.batch_size, decode_method=flags.decode_method,
            decode_options=overrides, language=flags.language, task=flags.task,
            word_timestamps=flags.word_timestamps, temperature=temperatures,
            compression_ratio_threshold=flags.compression_ratio_threshold,
            log_prob_threshold=flags.log_prob_threshold, seed=flags.seed,
            language_check=flags.language_check, vad=flags.vad,
            vad_model_dir=flags.vad_model_dir, threads=flags.threads)
    except ValueError as exc:
        raise fail(exc) from None
    except ray.exceptions.RayError as exc:  # an actor failed: a model that does not load, ...
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise fail(RuntimeError(f"the Ray run failed: {last}; finished parts are kept in "
                                f"{flags.output}, rerun to resume"), 1) from None
    finally:
        if connected:
            ray.shutdown()
    for part in run.removed:
        console.print(f"note: removed {part}: an unreadable part (a run killed while writing "
                      "it); its rows were transcribed again", soft_wrap=True)
    if not flags.quiet:
        console.print(f"ray: {run.rows} rows written ({run.errors} errors), {run.skipped} "
                      f"already in the output, {run.wall_s:.1f} s -> {flags.output}",
                      soft_wrap=True, highlight=False)
    if flags.fail_on_error and run.errors:
        raise typer.Exit(1)
