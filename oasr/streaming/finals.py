"""Finals to a file, kept across runs and across a kill.

``--output x.jsonl``: one line per final, appended and flushed as it arrives; a rerun appends
after the earlier runs' finals (a line a kill cut short is dropped first). The sidecar
``x.jsonl.oasr.json`` marks the file as ours (:mod:`oasr.io.output_target`).

``--output x.parquet``: finals are buffered and written as whole Parquet part files in
``x.parquet.parts/`` every ``flush_rows`` finals or ``flush_seconds`` after the oldest buffered
one (tmp file, fsync, rename: a kill leaves whole parts, readable as they are); ``close()``
merges the earlier ``x.parquet`` (if any) and the parts, in order, into a new ``x.parquet``
(atomically) and removes the parts. A run killed before its close leaves its parts, and the next
run's close folds them in, so a final once flushed is never lost. Files carry
``oasr_output: stream-finals`` in their key-value metadata.

One process writes one finals file (:class:`oasr.io.lock.OutputLock`); a device, FIFO, socket or
a file OASR did not write is refused before anything is loaded. A failed write (a full disk) is
one :class:`OutputError` naming the file and what is kept; ``abort()`` after it is quiet.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.io.lock import OutputLock, lock_path
from oasr.io.os_reason import reason
from oasr.io.output_format import OutputError, fsync_replace, write_part
from oasr.io.output_target import FINALS, KIND_KEY, check_output_target, write_sidecar
from oasr.io.stale_temp import remove_stale_temps
from oasr.streaming.stream import StreamResult

__all__ = ["FINALS_SCHEMA", "FinalsWriter", "final_row"]

_WORD = pa.struct([("word", pa.string()), ("start", pa.float64()), ("end", pa.float64()),
                   ("confidence", pa.float64())])
FINALS_SCHEMA = pa.schema([("source", pa.string()), ("segment", pa.int64()),
                           ("start", pa.float64()), ("end", pa.float64()),
                           ("text", pa.string()), ("endpoint_rule", pa.int64()),
                           ("words", pa.list_(_WORD))], metadata={KIND_KEY: FINALS})
_PART = "part-"


def final_row(source: str, result: StreamResult) -> dict[str, Any]:
    return {
        "source": source, "segment": result.segment, "start": round(result.start, 3),
        "end": round(result.end, 3), "text": result.committed,
        "endpoint_rule": result.endpoint_rule,
        "words": [{"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3),
                   "confidence": w.confidence} for w in result.words],
    }


class FinalsWriter:
    """Writes finals to ``path`` (``.jsonl`` or ``.parquet``); see the module docstring."""

    def __init__(self, path: str | Path, flush_rows: int = 64,
                 flush_seconds: float = 3.0) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"--output {path}: finals are written as .jsonl or .parquet")
        self.parquet = suffix == ".parquet"
        check_output_target(self.path, "parquet" if self.parquet else "jsonl", kind=FINALS)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.parts_dir = Path(f"{self.path}.parts")
        self._lock = OutputLock(lock_path(self.path), self.path).acquire()
        self._buffer: list[dict[str, Any]] = []
        self._since = 0.0
        self._failed: OutputError | None = None
        self._fh: Any = None
        try:
            if self.parquet:
                remove_stale_temps(self.parts_dir, f".{_PART}")
                remove_stale_temps(self.path.parent, f"{self.path.name}.tmp-")
            else:
                self._fh = self._open_jsonl()
        except OSError as err:
            self._lock.release()
            raise OutputError(f"cannot open {self.path} for finals: {reason(err)}; "
                              "choose an --output in a writable folder") from None

    def _open_jsonl(self) -> Any:
        if not self.path.exists():
            write_sidecar(self.path, FINALS, {})
        fh = self.path.open("a+b")
        size = fh.seek(0, os.SEEK_END)
        if size:
            # A line a kill cut short is dropped, so the next final starts a line of its own.
            fh.seek(max(0, size - (1 << 20)))
            tail = fh.read()
            if not tail.endswith(b"\n"):
                fh.truncate(size - len(tail) + tail.rfind(b"\n") + 1)
                fh.seek(0, os.SEEK_END)
        return fh

    # -------------------------------------------------------------- writing

    def write(self, source: str, result: StreamResult) -> None:
        if self._failed is not None:
            raise self._failed
        row = final_row(source, result)
        if self._fh is not None:
            try:
                self._fh.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
                self._fh.flush()
            except OSError as err:
                raise self._fail(err, "every final before this one") from None
            return
        if not self._buffer:
            self._since = time.monotonic()
        self._buffer.append(row)
        if len(self._buffer) >= self.flush_rows:
            self.flush()
        else:
            self.flush_if_due()

    def flush_if_due(self) -> None:
        """Flush when the oldest buffered final has waited ``flush_seconds`` (called as audio
        is fed, so a final does not wait for the next one to reach disk)."""
        if self._buffer and time.monotonic() - self._since >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the buffered finals as the next Parquet part (atomically)."""
        if self._failed is not None:
            raise self._failed
        if not self._buffer:
            return
        table = pa.Table.from_pylist(self._buffer, schema=FINALS_SCHEMA)
        try:
            self.parts_dir.mkdir(parents=True, exist_ok=True)
            parts = self._parts()
            number = int(parts[-1].name[len(_PART):-len(".parquet")]) + 1 if parts else 1
            write_part(table, self.parts_dir / f"{_PART}{number:06d}.parquet")
        except OSError as err:
            raise self._fail(err, f"the finals in {self.parts_dir}") from None
        self._buffer.clear()

    @property
    def failed(self) -> bool:
        """Whether a write failed (its error was raised; nothing more is written)."""
        return self._failed is not None

    def _parts(self) -> list[Path]:
        if not self.parts_dir.is_dir():
            return []
        return sorted(p for p in self.parts_dir.iterdir()
                      if p.name.startswith(_PART) and p.name.endswith(".parquet"))

    def _fail(self, err: OSError, kept: str) -> OutputError:
        self._failed = OutputError(
            f"cannot write finals to {self.path}: {reason(err)}; kept: {kept}; the "
            f"finals after it were not written; fix the cause (free space) and stream again")
        return self._failed

    # -------------------------------------------------------------- ending

    def close(self) -> None:
        """Flush, merge (Parquet) and release the file."""
        try:
            if self._failed is not None:
                raise self._failed
            if self._fh is not None:
                self._fh.close()
                self._fh = None
                return
            self.flush()
            self._merge()
        finally:
            self._release()

    def abort(self) -> None:
        """Stop after an error: what was flushed stays (parts are merged by the next run);
        quiet after a failed write, which was raised already."""
        try:
            if self._failed is None and self.parquet:
                self.flush()
        finally:
            self._release()

    def _release(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._lock.release()

    def _merge(self) -> None:
        parts = self._parts()
        if not parts and self.path.exists():
            return
        sources = ([self.path] if self.path.exists() else []) + parts
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                with pq.ParquetWriter(f, FINALS_SCHEMA) as writer:
                    for source in sources:  # ParquetFile: read_table imports pandas
                        for batch in pq.ParquetFile(source).iter_batches():
                            writer.write_table(
                                pa.Table.from_batches([batch]).cast(FINALS_SCHEMA))
                    if not sources:
                        writer.write_table(FINALS_SCHEMA.empty_table())
                f.flush()
                os.fsync(f.fileno())
            fsync_replace(tmp, self.path)
        except OSError as err:
            raise self._fail(err, f"the earlier finals and this run's in {self.parts_dir}") \
                from None
        finally:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(self.parts_dir, ignore_errors=True)
