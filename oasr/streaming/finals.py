"""Finals to a file: JSONL (one line per final, written as it arrives) or Parquet (at close)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oasr.streaming.stream import StreamResult


def final_row(source: str, result: StreamResult) -> dict[str, Any]:
    return {
        "source": source, "segment": result.segment, "start": round(result.start, 3),
        "end": round(result.end, 3), "text": result.committed,
        "endpoint_rule": result.endpoint_rule,
        "words": [{"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3),
                   "confidence": w.confidence} for w in result.words],
    }


class FinalsWriter:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"--output {path}: finals are written as .jsonl or .parquet")
        self.parquet = suffix == ".parquet"
        self.rows: list[dict[str, Any]] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = None if self.parquet else self.path.open("w", encoding="utf-8")

    def write(self, source: str, result: StreamResult) -> None:
        row = final_row(source, result)
        if self._fh is not None:
            self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            self._fh.flush()
        else:
            self.rows.append(row)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        word = pa.struct([("word", pa.string()), ("start", pa.float64()),
                          ("end", pa.float64()), ("confidence", pa.float64())])
        schema = pa.schema([("source", pa.string()), ("segment", pa.int64()),
                            ("start", pa.float64()), ("end", pa.float64()),
                            ("text", pa.string()), ("endpoint_rule", pa.int64()),
                            ("words", pa.list_(word))])
        pq.write_table(pa.Table.from_pylist(self.rows, schema=schema), self.path)
