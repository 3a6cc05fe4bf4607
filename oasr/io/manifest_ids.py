"""The first pass over a run's inputs: every row id read, counted and checked, no audio touched.

``oasr transcribe`` makes it while planning the run (``count_rows``), before the output is
opened or the model loaded, so a manifest a run could not finish fails in seconds having written
nothing, naming the row and the fix:

- two rows with one id (ids are the resume key: the second would never be written);
- an id that is not text or an integer (a float, a list, binary), or not valid Unicode (a JSON
  ``"\\ud800"``, bytes that are not UTF-8), which no output can hold
  (:func:`oasr.io.manifest.id_problem`);
- a manifest that cannot be read.

Only the id column of a Parquet or Arrow manifest is read; JSONL lines are parsed (a NeMo row's
id is its audio path); audio files take their ids from their names. Sharding and ``limit`` apply
as :func:`~oasr.io.manifest.iter_manifest` applies them, so the count is what the run will see.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.audio.errors import printable
from oasr.io.inputs import InputFile, ManifestError
from oasr.io.manifest import (
    _ROW_BITS,
    ColumnMap,
    _check_shard,
    _jsonl_entries,
    _Plan,
    _prepare,
    _row_id,
    _table_batches,
    duplicate_id,
    shard_keeps,
    source_of,
)
from oasr.io.os_reason import reason

__all__ = ["count_rows"]

_ID_BATCH_ROWS = 1 << 16


def _unit_ids(unit: InputFile, plan: _Plan | None,
              columns: ColumnMap) -> Iterator[tuple[int, str]]:
    """(position, id) of every row of one input, numbered and named as iter_manifest does."""
    if unit.kind == "audio":
        assert unit.audio_id is not None
        yield 0, unit.audio_id
        return
    if unit.kind == "jsonl":
        for entry in _jsonl_entries(unit, columns):
            yield entry.number, entry.row_id
        return
    assert plan is not None
    stem = printable(unit.path.stem)
    if plan.id is None:
        if unit.kind == "parquet":
            total = pq.ParquetFile(unit.path).metadata.num_rows
        else:
            total = sum(b.num_rows for b in _table_batches(unit, 1 << 30, columns=[plan.audio]))
        for k in range(total):
            yield k, f"{stem}-{k}"
        return
    start = 0
    for batch in _table_batches(unit, _ID_BATCH_ROWS, columns=[plan.id]):
        for k, value in enumerate(batch.column(0).to_pylist()):
            yield start + k, _row_id(plan, value, stem, start + k)[0]
        start += batch.num_rows


def count_rows(
    inputs: list[str],
    columns: ColumnMap = ColumnMap(),
    shard: tuple[int, int] | None = None,
    limit: int | None = None,
) -> int:
    """How many rows :func:`~oasr.io.manifest.iter_manifest` will yield, every id among them
    checked (see the module docstring).

    Raises:
        ManifestError: an input cannot be used or read, an id cannot be one, or two rows
            share an id; the message names the rows and the fix.
    """
    _check_shard(shard)
    prepared = _prepare(inputs, columns)
    if limit is not None and limit <= 0:
        return 0
    seen: dict[str, int] = {}
    total = 0
    for u, (unit, plan) in enumerate(prepared):
        try:
            for pos, row_id in _unit_ids(unit, plan, columns):
                if not shard_keeps(row_id, shard):
                    continue
                key = (u << _ROW_BITS) | pos
                first = seen.setdefault(row_id, key)
                if first != key:
                    raise duplicate_id(row_id, source_of(prepared, first), unit.source(pos))
                total += 1
                if limit is not None and total >= limit:
                    return total
        except (pa.ArrowException, OSError) as exc:
            raise ManifestError(f"cannot read {unit.kind} manifest "
                                f"{printable(str(unit.path))}: {reason(exc, unit.path)}"
                                ) from exc
    return total
