"""Split the bundled LibriSpeech test-other manifest (7 speakers x 10 utterances) by speaker:
the first three speakers in id order (1688, 1998, 2414) for choosing constants (calibration,
which layers stay in float), the other four (3005, 3080, 3331, 367) held out for the figures.

Usage: ``python benchmarks/speaker_halves.py OUT_DIR`` writes ``OUT_DIR/calibration.parquet``
(30 rows) and ``OUT_DIR/heldout.parquet`` (40 rows), audio bytes embedded as in the source.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "manifests" / "librispeech-test-other-70.parquet"
CALIBRATION_SPEAKERS = ("1688", "1998", "2414")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} OUT_DIR")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(MANIFEST)
    speaker = pc.utf8_split_whitespace(pc.replace_substring(table["id"], "-", " "))
    first = pc.list_element(speaker, 0)
    calib = pc.is_in(first, value_set=pa.array(CALIBRATION_SPEAKERS))
    for name, mask in (("calibration", calib), ("heldout", pc.invert(calib))):
        part = table.filter(mask)
        pq.write_table(part, out / f"{name}.parquet")
        print(f"{out / name}.parquet: {part.num_rows} rows, "
              f"{pc.sum(part['duration']).as_py():.1f} s")


if __name__ == "__main__":
    main()
