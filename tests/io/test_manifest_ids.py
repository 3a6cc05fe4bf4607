"""The first pass over a manifest's ids (``count_rows``): duplicates, ids no output can hold and
ids of the wrong type refused with the row and the fix, before any audio is read; names that
are not UTF-8 read as the bytes they are."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oasr.audio import load_audio
from oasr.io import ManifestError, count_rows, iter_manifest
from tests.helpers.data import SHARED_DATA

FLAC = SHARED_DATA / "librispeech-test-other-70" / "audio" / "1688-142285-0002.flac"


@pytest.fixture
def no_audio(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening any audio fails the test: the first pass reads ids only."""
    import oasr.audio.readers as readers

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("audio was opened")

    monkeypatch.setattr(readers, "open_reader", refuse)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_duplicate_late_in_a_jsonl_manifest_is_found_first(tmp_path: Path, no_audio) -> None:
    rows = [{"id": f"u{k}", "audio": "missing.flac"} for k in range(500)]
    rows[400]["id"] = "u7"
    manifest = _jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(ManifestError, match=r"duplicate id 'u7': .*m\.jsonl line 8 and "
                                            r".*m\.jsonl line 401 .*make them unique"):
        count_rows([str(manifest)])


def test_a_duplicate_across_parquet_manifests_names_both_rows(tmp_path: Path,
                                                             no_audio) -> None:
    for name, ids in (("a", ["x", "y"]), ("b", ["z", "x"])):
        pq.write_table(pa.table({"id": ids, "audio": ["f.flac"] * 2}), tmp_path / f"{name}.parquet")
    with pytest.raises(ManifestError, match=r"duplicate id 'x': .*a\.parquet row 0 and "
                                            r".*b\.parquet row 1"):
        count_rows([str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")])
    # Sharding and --limit count what the run sees: a duplicate past the limit is not met.
    assert count_rows([str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")], limit=3) == 3


def test_a_lone_surrogate_id_is_refused_with_its_line(tmp_path: Path, no_audio) -> None:
    manifest = _jsonl(tmp_path / "m.jsonl", [{"id": "ok", "audio": "a.flac"},
                                             {"id": "bad\ud800", "audio": "b.flac"}])
    assert '"bad\\ud800"' in manifest.read_text()  # json.dumps escapes it
    with pytest.raises(ManifestError, match=r"m\.jsonl line 2: the id 'bad\ufffd' is not "
                                            r"valid Unicode text .* --id-column"):
        count_rows([str(manifest)])
    with pytest.raises(ManifestError, match="line 2"):  # the lazy reader refuses it too
        list(iter_manifest([str(manifest)]))


@pytest.mark.parametrize("value", [1.5, True, [1], {"a": 1}])
def test_an_id_that_is_not_text_or_an_integer_is_refused(tmp_path: Path, no_audio,
                                                        value: object) -> None:
    manifest = _jsonl(tmp_path / "m.jsonl", [{"id": 1, "audio": "a.flac"},
                                             {"id": value, "audio": "b.flac"}])
    with pytest.raises(ManifestError, match=r"line 2: the id is a .*not a string or an "
                                            "integer"):
        count_rows([str(manifest)])


@pytest.mark.parametrize("dtype", [pa.float64(), pa.binary(), pa.list_(pa.int64())])
def test_a_parquet_id_column_of_the_wrong_type_is_refused(tmp_path: Path, no_audio,
                                                         dtype: pa.DataType) -> None:
    values = {pa.float64(): [1.0], pa.binary(): [b"x"], pa.list_(pa.int64()): [[1]]}[dtype]
    pq.write_table(pa.table({"id": pa.array(values, type=dtype), "audio": ["a.flac"]}),
                   tmp_path / "m.parquet")
    with pytest.raises(ManifestError, match=r"id column 'id' holds .*; ids must be strings "
                                            "or integers: cast it"):
        count_rows([str(tmp_path / "m.parquet")])


# ----------------------------------------------------------------------------- non-UTF-8 names


@pytest.fixture
def latin1_name(tmp_path: Path) -> tuple[bytes, Path]:
    """A real recording under a name holding the byte 0xE9 (Latin-1 'é', not UTF-8)."""
    folder = os.fsencode(tmp_path / "in")
    os.mkdir(folder)
    raw = folder + b"/caf\xe9.flac"
    shutil.copyfile(FLAC, raw)
    return raw, Path(os.fsdecode(folder))


def test_a_non_utf8_path_in_a_jsonl_manifest_is_the_file_of_those_bytes(
        tmp_path: Path, latin1_name: tuple[bytes, Path]) -> None:
    raw, _ = latin1_name
    manifest = tmp_path / "m.jsonl"
    manifest.write_bytes(b'{"audio_filepath": "' + raw + b'", "text": "r\xe9f"}\n')
    assert count_rows([str(manifest)]) == 1
    (row,) = list(iter_manifest([str(manifest)]))
    assert row.error is None, row.error
    assert os.fsencode(row.audio) == raw  # the bytes of the name, not a replacement character
    assert len(load_audio(row.audio)) > 16000
    # What reaches the output is writable text, the foreign bytes spelled \xNN.
    assert row.id.endswith("caf\\xe9.flac") and row.id.encode("utf-8")
    assert row.text == "r\\xe9f"
    assert row.passthrough["audio_filepath"] == row.id


def test_a_non_utf8_file_name_in_a_folder_gets_a_writable_id(
        latin1_name: tuple[bytes, Path]) -> None:
    _, folder = latin1_name
    (row,) = list(iter_manifest([str(folder)]))
    assert row.id == "caf\\xe9" and row.error is None
    assert len(load_audio(row.audio)) > 16000


def test_a_missing_non_utf8_path_is_named_writably(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_bytes(b'{"id": "a", "audio": "gone\xff.flac"}\n')
    (row,) = list(iter_manifest([str(manifest)]))
    assert "audio path does not exist" in row.error and "gone\\xff.flac" in row.error
    row.error.encode("utf-8")
