"""Build the bundled Parquet manifests from the LibriSpeech test-other sample.

Writes ``manifests/librispeech-test-other-70.parquet`` (all 70 utterances) and
``manifests/demo.parquet`` (the first 10). Each row holds ``id``, ``audio`` in the Hugging Face
``datasets`` layout (``struct<bytes: binary, path: string>`` with the FLAC file's bytes
embedded), ``text`` (the official reference, lower case) and ``duration`` (seconds, as listed in
``transcripts.tsv``). Rows keep the id order of ``transcripts.tsv``.

Usage:
    python scripts/make_manifests.py [--src DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SRC = Path(__file__).resolve().parents[2] / "shared" / "data" / "librispeech-test-other-70"
DEMO_ROWS = 10

SCHEMA = pa.schema([
    ("id", pa.string()),
    ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
    ("text", pa.string()),
    ("duration", pa.float64()),
])


def read_transcripts(src: Path) -> list[dict[str, str]]:
    """The rows of ``transcripts.tsv`` (id, duration, text), in file order."""
    with open(src / "transcripts.tsv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def build_table(src: Path, rows: list[dict[str, str]]) -> pa.Table:
    records = []
    for row in rows:
        name = f"{row['id']}.flac"
        data = (src / "audio" / name).read_bytes()
        records.append({
            "id": row["id"],
            # The path is the bare file name: readers take the bytes, the name only hints format.
            "audio": {"bytes": data, "path": name},
            "text": row["text"],
            "duration": float(row["duration"]),
        })
    return pa.Table.from_pylist(records, schema=SCHEMA)


def write(table: pa.Table, path: Path) -> None:
    # FLAC does not compress further; small row groups keep streaming reads light.
    pq.write_table(table, path, compression="none", row_group_size=10)
    print(f"wrote {path} ({table.num_rows} rows, {path.stat().st_size / 1e6:.1f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC,
                    help="folder with transcripts.tsv and audio/*.flac")
    ap.add_argument("--out", type=Path, default=REPO / "manifests")
    args = ap.parse_args()
    rows = read_transcripts(args.src)
    table = build_table(args.src, rows)
    args.out.mkdir(parents=True, exist_ok=True)
    write(table, args.out / "librispeech-test-other-70.parquet")
    write(table.slice(0, DEMO_ROWS), args.out / "demo.parquet")


if __name__ == "__main__":
    main()
