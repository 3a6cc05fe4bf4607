"""The Ray Data path (``oasr.integrations.ray``, ``oasr transcribe --ray``) on a local CPU
cluster: the same rows as the plain CLI, error rows included, and a rerun that skips done ids.

One cluster for the module, two CPUs, actors on half a CPU each: on a 2-core machine Ray's
default of one CPU per actor plus the read and write tasks can leave nothing to schedule on."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.integrations.ray import done_ids
from tests.transcribe.conftest import clip

SHORT = ("1688-142285-0002", "1688-142285-0003")
# Columns that differ run to run (none of the fixed ones do, beyond confidence's float
# rounding: rows batch differently on the actor than in one process).
ROUNDED = ("confidence",)

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="needs Ray Data: pip install 'oasr[ray]'")
    pytest.importorskip("ray.data", reason="needs Ray Data: pip install 'oasr[ray]'")
    # ray.init installs its own SIGTERM / SIGINT handlers and shutdown leaves them: the rest
    # of the suite gets the ones it had.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray
    finally:
        ray.shutdown()
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("ray-manifest")
    clips = [clip(c) for c in SHORT]
    broken = root / "broken.flac"
    broken.write_bytes(b"not audio\n" * 50)
    rows = [{"id": f"utt-{k:02d}", "audio": str(clips[k % 2]), "speaker": k} for k in range(5)]
    rows.insert(2, {"id": "broken", "audio": "broken.flac", "speaker": 99})  # relative path
    path = root / "m.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path, rows


def by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in rows}


def cause(error: str | None) -> str | None:
    """An error row's message without the part naming the row (``<file> row 2`` in one
    process, ``<file> id broken`` on Ray: a Ray dataset has no row positions)."""
    return None if error is None else error.split(": ", 1)[1]


def assert_same_rows(got: list[dict], expect: list[dict]) -> None:
    assert sorted(by_id(got)) == sorted(by_id(expect))
    g, e = by_id(got), by_id(expect)
    for row_id in e:
        a, b = g[row_id], e[row_id]
        assert set(a) == set(b), row_id
        assert {k: v for k, v in a.items() if k not in (*ROUNDED, "error")} == {
            k: v for k, v in b.items() if k not in (*ROUNDED, "error")}, row_id
        assert cause(a["error"]) == cause(b["error"]), row_id
        assert (a["confidence"] is None) == (b["confidence"] is None), row_id
        if a["confidence"] is not None:
            assert a["confidence"] == pytest.approx(b["confidence"], rel=1e-5, abs=1e-7)


def cli(*args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--no-progress", "--threads", "1"])


def test_ray_rows_equal_the_cli_and_a_rerun_skips_done_ids(ray_cluster, bundle, manifest,
                                                           tmp_path):
    from oasr.integrations.ray import transcribe_dataset

    path, rows = manifest
    single = cli(path, "-o", tmp_path / "one.parquet", "--model", bundle)
    assert single.exit_code == 0, single.output
    expect = pq.read_table(tmp_path / "one.parquet").to_pylist()
    assert [r["id"] for r in expect if r["error"]] == ["broken"]

    # A first run over part of the manifest (what a run killed after its first parts leaves),
    # through the Python helper: read, map on one actor, write.
    head = path.with_name("head.parquet")  # beside the manifest: its relative path resolves
    pq.write_table(pa.Table.from_pylist(rows[:3]), head)
    out = tmp_path / "ray-out"
    ds = ray_cluster.data.read_parquet(str(head))
    transcribe_dataset(ds, str(bundle), num_cpus=0.5, concurrency=1, batch_rows=2, threads=1,
                       folder=str(path.parent), label=str(head)).write_parquet(str(out))
    assert done_ids(out)[:2] == ({r["id"] for r in rows[:3]}, 1)

    # The whole manifest through the command line: only the ids not yet in the folder run.
    again = cli(path, "-o", out, "--model", bundle, "--ray", "local", "--ray-cpus", "0.5",
                "--ray-actors", "1")
    assert again.exit_code == 0, again.output
    assert "3 rows written (0 errors), 3 already in the output" in " ".join(again.output.split())
    got = pq.read_table(out).to_pylist()
    assert len(got) == len(rows) == len({r["id"] for r in got})  # every id once
    assert_same_rows(got, expect)
    broken = by_id(got)["broken"]["error"]
    assert broken.startswith(f"{head} id broken: ") and "holds text, not audio" in broken


def test_transcriber_maps_batches_like_the_runner(bundle, manifest):
    """The callable class alone, as map_batches runs it on an actor: rows in batch order,
    passthrough kept, a batch split in two giving the same rows, an empty batch typed."""
    from oasr.integrations.ray import Transcriber

    path, rows = manifest
    table = pq.read_table(path)
    local = Transcriber(str(bundle), threads=1, folder=str(path.parent), label=str(path))
    whole = local(table)
    direct = whole.to_pylist()
    assert [r["id"] for r in direct] == [r["id"] for r in rows]
    assert [r["speaker"] for r in direct] == [r["speaker"] for r in rows]  # passthrough
    halves = local(table.slice(0, 3)).to_pylist() + local(table.slice(3)).to_pylist()
    assert_same_rows(halves, direct)
    empty = local(table.slice(0, 0))
    assert empty.num_rows == 0 and empty.schema.names == whole.schema.names


def test_transcriber_adds_the_emitted_column(bundle, manifest):
    """emit=("token_ids",) on the actor class: the CLI's list<int32> column before
    passthrough, null on the error row, an empty batch typed alike."""
    from oasr.integrations.ray import Transcriber
    from oasr.io.schema import OUTPUT_COLUMNS

    path, _ = manifest
    table = pq.read_table(path)
    local = Transcriber(str(bundle), threads=1, folder=str(path.parent), label=str(path),
                        emit=("token_ids",))
    out = local(table.slice(1, 2))
    assert out.schema.names == [*OUTPUT_COLUMNS, "token_ids", "audio", "speaker"]
    assert out.schema.field("token_ids").type == pa.list_(pa.int32())
    got = by_id(out.to_pylist())
    assert got["broken"]["token_ids"] is None and got["utt-01"]["token_ids"]
    assert local(table.slice(0, 0)).schema == out.schema


def test_ray_refuses_what_it_does_not_serve(manifest, tmp_path, bundle):
    path, _ = manifest
    for extra, needle in ((["--shard", "0/2"], "--shard"), (["--limit", "2"], "--limit"),
                          (["--retry-errors"], "--retry-errors"), (["-f", "jsonl"], "--format")):
        res = cli(path, "-o", tmp_path / "o", "--model", bundle, "--ray", "local", *extra)
        assert res.exit_code == 2 and needle in res.output, (extra, res.output)
    jl = tmp_path / "m.jsonl"
    jl.write_text('{"id": "a", "audio": "x.flac"}\n')
    res = cli(jl, "-o", tmp_path / "o", "--model", bundle, "--ray", "local")
    assert res.exit_code == 2 and "reads Parquet manifests" in res.output


def test_done_ids_drops_a_part_a_killed_write_left(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "error": [None, "x"]}), out / "p0.parquet")
    (out / "p1.parquet").write_bytes(b"PAR1 truncated")
    ids, errors, bad = done_ids(out)
    assert (ids, errors, bad) == ({"a", "b"}, 1, [out / "p1.parquet"])
    assert not (out / "p1.parquet").exists()


def test_missing_ray_names_the_extra(monkeypatch):
    import builtins

    from oasr.integrations import ray as integration

    real = builtins.__import__

    def no_ray(name, *args, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ImportError, match=r"pip install 'oasr\[ray\]'"):
        integration.import_ray()
