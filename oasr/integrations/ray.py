"""Ray Data: transcribe a ``ray.data.Dataset`` of manifest rows on a pool of model actors.

    import ray
    from oasr.integrations.ray import transcribe_dataset

    ds = ray.data.read_parquet("s3://bucket/manifest/")
    transcribe_dataset(ds, model="whisper-tiny.en", num_gpus=1, concurrency=8) \\
        .write_parquet("s3://bucket/transcripts/")

:class:`Transcriber` is the callable class ``Dataset.map_batches`` runs on each actor: the model
loads once, in ``__init__``, and each batch (a ``pyarrow.Table`` of manifest rows: the columns
``oasr transcribe`` reads from a Parquet manifest) goes through the CLI's own runner
(:class:`oasr.transcribe.runner.Transcriber`) and comes back as a table of the CLI's output
schema, error rows included. :func:`transcribe_parquet` is ``oasr transcribe --ray``: Parquet in,
a folder of Parquet parts out, ids already in that folder skipped (a rerun resumes).

Ray is the optional extra ``oasr[ray]``; it is imported only here, when used.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.io.manifest import ColumnMap, id_column, rows_from_table, table_plan_schema
from oasr.io.schema import output_schema
from oasr.io.writer import OutputRow, rows_to_table

__all__ = ["RAY_INSTALL", "RayRun", "Transcriber", "done_ids", "import_ray", "transcribe_dataset",
           "transcribe_parquet"]

RAY_INSTALL = "pip install 'oasr[ray]'"
# Manifest rows per map_batches call: enough for the engine to fill its batches.
DEFAULT_BATCH_ROWS = 64


def import_ray() -> Any:
    """``ray`` with Ray Data, or an ImportError naming the install."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ImportError(f"the Ray integration needs Ray Data: {RAY_INSTALL}") from None
    return ray


class Transcriber:
    """``Dataset.map_batches(Transcriber, fn_constructor_kwargs=..., batch_format="pyarrow")``:
    one model per actor, each batch of manifest rows -> a table of output rows.

    The run is set up by :class:`~oasr.transcribe.session.TranscriptionSession` from
    ``options`` (a :class:`~oasr.transcribe.options.RunOptions`) and/or the same options as flat
    keywords (``model``, ``device``, ``batch_size``, ``beam_size``, ``language``, ``vad``, ...:
    ``RunOptions.flat_names()``; they override ``options``), exactly as ``oasr transcribe``
    and ``oasr.load`` set theirs up. ``columns`` picks the id/audio/text columns
    (:class:`~oasr.io.manifest.ColumnMap`); relative audio paths resolve against ``folder``;
    an error row names its row as ``<label> id <id>``.
    """

    def __init__(self, model: str = "", *, options: Any = None, columns: ColumnMap | None = None,
                 folder: str = ".", label: str = "dataset", **flat: Any) -> None:
        from oasr.transcribe.options import RunOptions
        from oasr.transcribe.session import TranscriptionSession

        values = options.flat() if options is not None else {}
        values.update(flat)
        if model:
            values["model"] = model
        self.session = TranscriptionSession(RunOptions.from_flat(**values))
        self.engine = self.session.engine
        # A manifest column named like one --emit adds passes through as input_<name>.
        self.emit = tuple(self.session.options.output.emit)
        self.columns = dataclasses.replace(columns or ColumnMap(), emit=self.emit)
        self.folder, self.label = folder, label

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        passthrough = table_plan_schema(batch.schema, self.columns, self.label)
        if batch.num_rows == 0:
            return output_schema(passthrough, self.emit).empty_table()
        runner = self.session.transcriber(self.session.transcribe_options(columns=self.columns))
        rows = rows_from_table(batch, self.columns, self.folder, self.label)
        outs: list[OutputRow] = []
        for out, _ in runner.run(rows):
            for warning in out.warnings:  # the actor's log (Ray sends it to the driver)
                print(f"warning: {warning}", file=sys.stderr)
            outs.append(out)
        return rows_to_table(outs, passthrough, emit=self.emit)


def _actor_resources(ray: Any, num_gpus: float | None, concurrency: int | None,
                     num_cpus: float | None) -> tuple[float, int, float]:
    """Defaults: one GPU per actor and one actor per GPU when the cluster has GPUs, else one
    CPU actor on one CPU."""
    gpus_in_cluster = 0.0
    if ray.is_initialized():
        gpus_in_cluster = float(ray.cluster_resources().get("GPU", 0.0))
    if num_gpus is None:
        num_gpus = 1.0 if gpus_in_cluster >= 1 else 0.0
    if concurrency is None:
        concurrency = max(int(gpus_in_cluster // num_gpus), 1) if num_gpus > 0 else 1
    if num_cpus is None:
        num_cpus = 1.0
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 actor, got {concurrency}")
    return num_gpus, concurrency, num_cpus


def transcribe_dataset(ds: Any, model: str = "", *, num_gpus: float | None = None,
                       concurrency: int | None = None, num_cpus: float | None = None,
                       batch_rows: int = DEFAULT_BATCH_ROWS, **options: Any) -> Any:
    """``ds`` (manifest rows: an id column and an audio column of paths, bytes or
    ``{bytes, path}`` structs, as ``oasr transcribe`` reads) mapped to output rows on
    ``concurrency`` :class:`Transcriber` actors, each holding ``num_gpus`` GPUs and ``num_cpus``
    CPUs (defaults: one actor per GPU of the cluster, else one CPU actor; on a machine with few
    cores give fractional ``num_cpus``, e.g. 0.5, so the reads still find a CPU).
    ``options``: :class:`Transcriber`'s keyword arguments. Returns the lazy mapped dataset."""
    ray = import_ray()
    num_gpus, concurrency, num_cpus = _actor_resources(ray, num_gpus, concurrency, num_cpus)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    return ds.map_batches(
        Transcriber, fn_constructor_kwargs={"model": model, **options},
        batch_format="pyarrow", batch_size=batch_rows, num_gpus=num_gpus, num_cpus=num_cpus,
        compute=ray.data.ActorPoolStrategy(size=concurrency))


# ------------------------------------------------------------------------------- the CLI path


def done_ids(folder: str | Path, id_name: str = "id",
             drop_unreadable: bool = True) -> tuple[set[str], int, list[Path]]:
    """(ids, error rows, unreadable files) of the Parquet parts in ``folder``.

    A part without a valid footer is what a run killed while writing leaves behind; with
    ``drop_unreadable`` it is removed, so its rows are transcribed again and no reader of the
    folder trips on it."""
    ids: set[str] = set()
    errors = 0
    bad: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return ids, errors, bad
    for part in sorted(root.rglob("*.parquet")):
        try:
            table = pq.read_table(part, columns=[id_name, "error"])
        except (pa.ArrowException, OSError):
            bad.append(part)
            if drop_unreadable:
                part.unlink()
            continue
        ids.update(table.column(id_name).to_pylist())
        errors += table.num_rows - table.column("error").null_count
    return ids, errors, bad


def _keep_todo(batch: pa.Table, id_name: str, done: pa.Array) -> pa.Table:
    import pyarrow.compute as pc

    ids = pc.cast(batch.column(id_name), pa.string())
    return batch.filter(pc.invert(pc.is_in(ids, value_set=done)))


@dataclass
class RayRun:
    """What :func:`transcribe_parquet` did: rows written now, error rows among them, ids
    skipped (already in the output), unreadable parts removed, and the wall time."""

    rows: int
    errors: int
    skipped: int
    removed: list[Path]
    wall_s: float


def connect(address: str, num_cpus: float | None = None) -> bool:
    """``local``: start a local cluster in this process; ``auto``: join the running one (Ray's
    own lookup); anything else: a cluster address (``ray://host:10001``, ``host:6379``).
    A process already connected keeps its connection. True when this call connected (the
    caller then disconnects with ``ray.shutdown()``)."""
    import logging

    ray = import_ray()
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
    if address == "local":
        if num_cpus is not None:
            kw["num_cpus"] = num_cpus
        ray.init(**kw)
    else:
        ray.init(address=address, **kw)
    return True


def transcribe_parquet(inputs: list[str], output: str | Path, model: str = "", *,
                       columns: ColumnMap | None = None, num_gpus: float | None = None,
                       concurrency: int | None = None, num_cpus: float | None = None,
                       batch_rows: int = DEFAULT_BATCH_ROWS, progress: bool = True,
                       **options: Any) -> RayRun:
    """``oasr transcribe MANIFEST -o FOLDER --ray ...`` once connected (:func:`connect`): read
    the Parquet manifests with ``ray.data.read_parquet``, drop the ids already in ``output``,
    transcribe the rest on the actor pool and ``write_parquet`` them into ``output`` as new
    parts. Reruns resume: every written part holds finished rows only."""
    ray = import_ray()
    columns = columns or ColumnMap()
    start = time.perf_counter()
    sources = [str(Path(p).resolve()) for p in inputs]
    folder = str(Path(sources[0]).parent if Path(sources[0]).is_file() else Path(sources[0]))
    label = inputs[0] if len(inputs) == 1 else "manifest"
    ray.data.DataContext.get_current().enable_progress_bars = progress
    ds = ray.data.read_parquet(sources)
    id_name = id_column(ds.schema().base_schema, columns, label)
    if id_name is None:
        raise ValueError(f"{label}: --ray needs an id column (Ray Data has no row positions "
                         "to name rows by); name it with --id-column")
    done, errors_before, removed = done_ids(output)
    if done:
        ds = ds.map_batches(_keep_todo, batch_format="pyarrow", num_cpus=num_cpus or 1.0,
                            fn_kwargs={"id_name": id_name,
                                       "done": pa.array(sorted(done), type=pa.string())})
    mapped = transcribe_dataset(ds, model, num_gpus=num_gpus, concurrency=concurrency,
                                num_cpus=num_cpus, batch_rows=batch_rows, columns=columns,
                                folder=folder, label=label, **options)
    mapped.write_parquet(str(output))
    ids_after, errors_after, _ = done_ids(output)
    return RayRun(rows=len(ids_after) - len(done), errors=errors_after - errors_before,
                  skipped=len(done), removed=removed, wall_s=time.perf_counter() - start)
