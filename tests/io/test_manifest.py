"""Manifest reading: every input kind, column detection, row errors, streaming, sharding."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import soundfile as sf

from oasr.io.manifest import (
    ColumnMap,
    ManifestError,
    iter_manifest,
    passthrough_schema,
)
from oasr.io.manifest_ids import count_rows
from tests.helpers.data import SHARED_DATA

AUDIO = SHARED_DATA / "librispeech-test-other-70/audio"
FLACS = sorted(AUDIO.glob("*.flac"))[:3]


def _audio_struct_type() -> pa.DataType:
    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def test_hf_parquet_with_embedded_bytes(tmp_path: Path) -> None:
    # The Hugging Face datasets layout: audio struct{bytes, path}, path a bare file name.
    table = pa.table(
        {
            "id": [f.stem for f in FLACS[:2]],
            "audio": pa.array(
                [{"bytes": f.read_bytes(), "path": f.name} for f in FLACS[:2]],
                type=_audio_struct_type(),
            ),
            "text": ["first", "second"],
            "speaker_id": pa.array([1688, 1689], type=pa.int64()),
        }
    )
    manifest = tmp_path / "hf.parquet"
    pq.write_table(table, manifest)

    rows = list(iter_manifest([str(manifest)]))
    assert [r.id for r in rows] == [f.stem for f in FLACS[:2]]
    for row, flac in zip(rows, FLACS[:2], strict=True):
        assert row.error is None
        assert row.audio == flac.read_bytes()
        samples, rate = sf.read(io.BytesIO(row.audio))
        assert rate == 16000 and len(samples) > rate  # real speech, over a second
    assert [r.text for r in rows] == ["first", "second"]
    assert rows[1].passthrough == {"speaker_id": 1689}
    assert rows[1].source == f"{manifest} row 1"
    assert count_rows([str(manifest)]) == 2


def test_struct_without_bytes_falls_back_to_path(tmp_path: Path) -> None:
    shutil.copy(FLACS[0], tmp_path / "a.flac")
    table = pa.table(
        {"audio": pa.array([{"bytes": None, "path": "a.flac"}], type=_audio_struct_type())}
    )
    pq.write_table(table, tmp_path / "m.parquet")
    (row,) = iter_manifest([str(tmp_path / "m.parquet")])
    assert row.audio == str((tmp_path / "a.flac").resolve())
    assert row.id == "m-0"  # no id column: <manifest stem>-<row index>


def test_path_column_resolves_against_manifest_folder(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "data"
    (folder / "clips").mkdir(parents=True)
    shutil.copy(FLACS[0], folder / "clips" / "one.flac")
    pq.write_table(
        pa.table({"key": ["u1", "u2"], "audio_filepath": ["clips/one.flac", "clips/gone.flac"]}),
        folder / "m.parquet",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # resolution must not depend on the working directory

    ok, missing = iter_manifest([str(folder / "m.parquet")])
    assert ok.id == "u1" and ok.error is None
    assert ok.audio == str((folder / "clips" / "one.flac").resolve())
    assert Path(ok.audio).is_absolute()
    assert missing.id == "u2" and missing.audio is None
    resolved = str((folder / "clips" / "gone.flac").resolve())
    assert missing.error is not None and resolved in missing.error
    assert "manifest's folder" in missing.error


def test_nemo_jsonl_with_segments_and_bad_line(tmp_path: Path) -> None:
    shutil.copy(FLACS[0], tmp_path / "a.flac")
    lines = [
        json.dumps(
            {
                "audio_filepath": "a.flac",
                "duration": 2.5,
                "text": "hi",
                "offset": 1.0,
                "speaker": "s1",
            }
        ),
        "",
        "{not json",
        json.dumps({"audio_filepath": "a.flac", "duration": 3.0, "text": "whole"}),
        json.dumps({"audio_filepath": "a.flac", "offset": -1.0}),
    ]
    manifest = tmp_path / "nemo.jsonl"
    manifest.write_text("\n".join(lines) + "\n")

    rows = list(iter_manifest([str(manifest)]))
    # No id column: the audio path as written is the id (NeMo), @offset for a later segment.
    assert [r.id for r in rows] == ["a.flac@1", "nemo-1", "a.flac", "a.flac@-1"]
    first, bad, whole, negative = rows
    assert (first.offset, first.duration, first.text) == (1.0, 2.5, "hi")
    assert first.passthrough == {"audio_filepath": "a.flac", "speaker": "s1"}
    assert first.audio == str((tmp_path / "a.flac").resolve())
    assert bad.error is not None and str(manifest) in bad.error and "line 3" in bad.error
    assert bad.source == f"{manifest} line 3"
    assert (whole.offset, whole.duration, whole.error) == (0.0, 3.0, None)
    assert negative.error is not None and "offset" in negative.error
    assert count_rows([str(manifest)]) == 4


def test_start_end_columns_become_offset_duration(tmp_path: Path) -> None:
    shutil.copy(FLACS[0], tmp_path / "a.flac")
    pq.write_table(
        pa.table(
            {
                "id": ["s1", "s2"],
                "path": ["a.flac", "a.flac"],
                "start": [1.5, 4.0],
                "end": [4.0, 3.0],
                "language": ["en", None],
                "prompt": ["ctx", None],
            }
        ),
        tmp_path / "seg.parquet",
    )
    good, backwards = iter_manifest([str(tmp_path / "seg.parquet")])
    assert (good.offset, good.duration, good.error) == (1.5, 2.5, None)
    assert (good.language, good.prompt, good.task) == ("en", "ctx", None)
    assert good.passthrough == {"path": "a.flac"}  # the audio path as written passes through
    assert backwards.error is not None and "end" in backwards.error


@pytest.mark.parametrize("stream_format", [False, True])
def test_arrow_ipc_file_and_stream(tmp_path: Path, stream_format: bool) -> None:
    table = pa.table(
        {
            "utterance_id": ["a", "b", "c"],
            "audio": [f.read_bytes() for f in FLACS],
            "transcript": ["x", "y", "z"],
        }
    )
    path = tmp_path / ("m.arrow" if stream_format else "m.feather")
    if stream_format:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=2)
    else:
        feather.write_feather(table, path, chunksize=2)
    rows = list(iter_manifest([str(path)], batch_rows=1))
    assert [r.id for r in rows] == ["a", "b", "c"]
    assert [r.text for r in rows] == ["x", "y", "z"]
    assert rows[2].audio == FLACS[2].read_bytes()
    assert count_rows([str(path)]) == 3
    assert count_rows([str(path)], shard=(0, 2)) + count_rows([str(path)], shard=(1, 2)) == 3


def test_folder_recursive_sorted_audio_only_with_id_collisions(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "b").mkdir(parents=True)
    (root / "a").mkdir()
    shutil.copy(FLACS[0], root / "b" / "same.flac")
    shutil.copy(FLACS[1], root / "a" / "same.flac")
    shutil.copy(FLACS[2], root / "zeta.flac")
    (root / "notes.txt").write_text("not audio")
    (root / "a" / "._same.flac").write_bytes(b"macos resource fork")

    rows = list(iter_manifest([str(root)]))
    # Colliding stems take the relative path without extension; the rest keep the stem.
    assert [r.id for r in rows] == ["a/same", "b/same", "zeta"]
    assert rows[0].audio == str((root / "a" / "same.flac").resolve())
    assert all(r.error is None and r.passthrough == {} for r in rows)
    assert count_rows([str(root)]) == 3


def test_glob_is_sorted_and_may_mix_audio(tmp_path: Path) -> None:
    for i, flac in enumerate(FLACS):
        shutil.copy(flac, tmp_path / f"clip{2 - i}.flac")
    rows = list(iter_manifest([str(tmp_path / "clip*.flac")]))
    assert [r.id for r in rows] == ["clip0", "clip1", "clip2"]
    with pytest.raises(ManifestError, match="no manifests or audio files match"):
        iter_manifest([str(tmp_path / "*.parquet")])
    with pytest.raises(ManifestError, match="input not found"):
        iter_manifest([str(tmp_path / "missing.parquet")])


def test_explicit_missing_column_lists_available(tmp_path: Path) -> None:
    manifest = tmp_path / "m.parquet"
    pq.write_table(pa.table({"uid": ["a"], "wav": ["a.flac"], "sentence": ["x"]}), manifest)
    with pytest.raises(ManifestError) as info:
        iter_manifest([str(manifest)], ColumnMap(audio="audio_path"))
    message = str(info.value)
    assert str(manifest) in message and "audio_path" in message
    assert "uid, wav, sentence" in message
    # No audio column found by detection either: the same listing, and the option to use.
    with pytest.raises(ManifestError, match="--audio-column"):
        iter_manifest([str(manifest)])
    rows = list(iter_manifest([str(manifest)], ColumnMap(id="uid", audio="wav")))
    assert rows[0].id == "a" and rows[0].text == "x"


def _big_manifest(path: Path, n: int) -> None:
    table = pa.table(
        {"id": [f"r{i:05d}" for i in range(n)], "audio": [b"\x00"] * n, "n": list(range(n))}
    )
    pq.write_table(table, path, row_group_size=1000)


def test_streams_record_batches(tmp_path: Path, monkeypatch) -> None:
    manifest = tmp_path / "big.parquet"
    _big_manifest(manifest, 10_000)
    produced = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        for batch in original(self, *args, **kwargs):
            produced.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    rows = iter_manifest([str(manifest)], batch_rows=100)
    first = next(rows)
    assert first.id == "r00000" and first.passthrough == {"n": 0}
    assert 1 <= len(produced) < 10  # the first row came after a batch, long before the last
    assert max(produced) <= 100
    rest = list(rows)
    assert [r.id for r in rest] == [f"r{i:05d}" for i in range(1, 10_000)]
    assert sum(produced) == 10_000


def test_shards_partition_the_ids(tmp_path: Path) -> None:
    manifest = tmp_path / "big.parquet"
    _big_manifest(manifest, 2_000)
    everything = [r.id for r in iter_manifest([str(manifest)])]
    shards = [[r.id for r in iter_manifest([str(manifest)], shard=(i, 4))] for i in range(4)]
    assert sorted(sum(shards, [])) == sorted(everything)
    assert sum(len(s) for s in shards) == len(set(sum(shards, [])))  # disjoint
    assert all(200 < len(s) < 800 for s in shards)  # a hash spreads them
    for i, ids in enumerate(shards):
        members = set(ids)
        assert ids == [x for x in everything if x in members]  # manifest order kept
        assert count_rows([str(manifest)], shard=(i, 4)) == len(ids)
    # Independent of order: the same id lands in the same shard from a reversed manifest.
    reverse = tmp_path / "reverse.parquet"
    pq.write_table(pq.read_table(manifest).take(list(range(1999, -1, -1))), reverse)
    assert {r.id for r in iter_manifest([str(reverse)], shard=(2, 4))} == set(shards[2])
    with pytest.raises(ManifestError, match="0 <= i < n"):
        iter_manifest([str(manifest)], shard=(4, 4))


def test_generated_ids_shard_and_count(tmp_path: Path) -> None:
    manifest = tmp_path / "gen.parquet"
    pq.write_table(pa.table({"audio": [b"\x01"] * 50}), manifest)
    ids = [r.id for r in iter_manifest([str(manifest)], shard=(1, 3))]
    assert ids and all(i.startswith("gen-") for i in ids)
    assert count_rows([str(manifest)], shard=(1, 3)) == len(ids)


def test_limit_applies_after_sharding(tmp_path: Path) -> None:
    manifest = tmp_path / "big.parquet"
    _big_manifest(manifest, 500)
    shard = [r.id for r in iter_manifest([str(manifest)], shard=(1, 3))]
    limited = [r.id for r in iter_manifest([str(manifest)], shard=(1, 3), limit=7)]
    assert limited == shard[:7]
    assert count_rows([str(manifest)], shard=(1, 3), limit=7) == 7
    assert count_rows([str(manifest)], limit=10_000) == 500
    assert list(iter_manifest([str(manifest)], limit=0)) == []


def test_duplicate_ids_name_both_sources(tmp_path: Path) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": ["x", "y"], "audio": [b"\x00", b"\x00"]}), a)
    pq.write_table(pa.table({"id": ["z", "y"], "audio": [b"\x00", b"\x00"]}), b)
    rows = iter_manifest([str(a), str(b)])
    with pytest.raises(ManifestError) as info:
        list(rows)
    assert f"{a} row 1" in str(info.value) and f"{b} row 1" in str(info.value)
    assert "'y'" in str(info.value)


def test_passthrough_names_and_types(tmp_path: Path) -> None:
    # A previous output used as a manifest: its columns named like output columns get renamed.
    manifest = tmp_path / "prev.parquet"
    pq.write_table(
        pa.table(
            {
                "id": ["a"],
                "audio": [b"\x00"],
                "words": pa.array([["w"]]),
                "error": pa.array([None], type=pa.string()),
                "score": pa.array([0.5], type=pa.float32()),
            }
        ),
        manifest,
    )
    (row,) = iter_manifest([str(manifest)])
    assert row.passthrough == {"input_words": ["w"], "input_error": None, "score": 0.5}
    schema = passthrough_schema([str(manifest)])
    assert schema is not None
    assert schema.names == ["input_words", "input_error", "score"]
    assert schema.field("score").type == pa.float32()
    assert passthrough_schema([str(FLACS[0])]) is None
