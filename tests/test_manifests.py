"""The bundled manifests (``manifests/*.parquet``) and the transformers reference fixture."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oasr.audio import load_audio
from oasr.io.manifest import iter_manifest
from tests.helpers.data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
FULL = REPO / "manifests" / "librispeech-test-other-70.parquet"
DEMO = REPO / "manifests" / "demo.parquet"
FIXTURE = REPO / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"
# The source the manifests were built from (scripts/make_manifests.py); not in the repo.
SOURCE_TSV = SHARED_DATA / "librispeech-test-other-70/transcripts.tsv"

AUDIO_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
LIBRISPEECH_ID = re.compile(r"^\d+-\d+-\d{4}$")


@pytest.fixture(scope="module")
def full() -> pa.Table:
    return pq.read_table(FULL)


@pytest.fixture(scope="module")
def demo() -> pa.Table:
    return pq.read_table(DEMO)


@pytest.mark.parametrize("path, rows", [(FULL, 70), (DEMO, 10)])
def test_schema_and_row_count(path: Path, rows: int) -> None:
    table = pq.read_table(path)
    assert table.num_rows == rows
    assert table.schema.names == ["id", "audio", "text", "duration"]
    assert table.schema.field("audio").type == AUDIO_TYPE
    assert pa.types.is_string(table.schema.field("id").type)
    assert pa.types.is_string(table.schema.field("text").type)
    assert pa.types.is_floating(table.schema.field("duration").type)


def test_ids_unique_and_librispeech_shaped(full: pa.Table) -> None:
    ids = full.column("id").to_pylist()
    assert len(set(ids)) == len(ids)
    assert all(LIBRISPEECH_ID.match(i) for i in ids)
    assert ids == sorted(ids)
    assert len({i.split("-")[0] for i in ids}) == 7  # 7 speakers x 10 utterances


def test_demo_is_the_first_ten(full: pa.Table, demo: pa.Table) -> None:
    assert demo.select(["id", "text", "duration"]).equals(
        full.slice(0, 10).select(["id", "text", "duration"]))
    assert demo.column("audio").to_pylist() == full.slice(0, 10).column("audio").to_pylist()


@pytest.mark.skipif(not SOURCE_TSV.is_file(), reason=f"source data not here: {SOURCE_TSV}")
def test_rows_match_source_transcripts(full: pa.Table) -> None:
    with open(SOURCE_TSV, encoding="utf-8", newline="") as f:
        src = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert full.column("id").to_pylist() == [r["id"] for r in src]
    assert full.column("text").to_pylist() == [r["text"] for r in src]
    assert full.column("duration").to_pylist() == [float(r["duration"]) for r in src]


def test_embedded_flac_decodes_to_listed_duration(full: pa.Table) -> None:
    for row in full.to_pylist():
        audio = row["audio"]
        assert audio["bytes"][:4] == b"fLaC", row["id"]
        assert audio["path"] == f"{row['id']}.flac"
        x = load_audio(audio["bytes"], sample_rate=16000)
        assert x.ndim == 1
        assert abs(x.shape[0] / 16000 - row["duration"]) <= 0.05, row["id"]
        assert float(abs(x).max()) > 0.01, f"{row['id']} is silent"


def test_references_are_lower_case_words(full: pa.Table) -> None:
    for text in full.column("text").to_pylist():
        assert text and text == text.strip() and text == text.lower()


def test_manifest_reader_takes_the_bundled_file(full: pa.Table) -> None:
    rows = list(iter_manifest([str(FULL)]))
    assert [r.id for r in rows] == full.column("id").to_pylist()
    assert [r.text for r in rows] == full.column("text").to_pylist()
    assert all(r.error is None and isinstance(r.audio, bytes) for r in rows)


def test_fixture_covers_every_utterance(full: pa.Table) -> None:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert {"model", "transformers_version", "command", "transcripts"} <= set(data)
    transcripts = data["transcripts"]
    assert set(transcripts) == set(full.column("id").to_pylist())
    for uid, text in transcripts.items():
        assert isinstance(text, str) and text.strip() == text and text, uid
        assert "<|" not in text, f"{uid}: special token left in the text"
