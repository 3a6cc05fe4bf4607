"""What a run dispatched reaches the user: ``oasr transcribe`` and ``oasr bench`` end with the
line and record it (Parquet metadata, bench JSON); ``oasr gaps --run`` reports a workload."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr import ops
from oasr.cli.app import app
from tests.transcribe.conftest import clip, write_tiny_bundle

runner = CliRunner()
CLIPS = ("1688-142285-0002", "1688-142285-0003")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("dispatch")
    bundle = write_tiny_bundle(tmp / "tiny", window_s=6.0)
    manifest = tmp / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": c, "audio": str(clip(c))}) + "\n"
                                for c in CLIPS), encoding="utf-8")
    return bundle, manifest


def _line(output: str) -> str:
    found = [ln for ln in output.splitlines() if ln.startswith("dispatch (backend ")]
    assert len(found) == 1, output
    return found[0]


def test_transcribe_prints_and_records_what_the_run_dispatched(setup, tmp_path):
    bundle, manifest = setup
    out = tmp_path / "out.parquet"
    res = runner.invoke(app, ["transcribe", str(manifest), "-o", str(out), "--model",
                              str(bundle), "--device", "cpu", "--no-progress"])
    assert res.exit_code == 0, res.output
    line = _line(res.output)
    assert "out_of_scope" in line and "linear:cpu" in line  # a CPU run: torch serves, counted
    meta = pq.read_schema(out).metadata
    recorded = json.loads(meta[ops.DISPATCH_METADATA_KEY.encode()])
    assert recorded["total"] > 0
    assert recorded["cases"]["out_of_scope"] == recorded["total"]
    assert recorded["calls"]["out_of_scope"]["linear:cpu"] > 0
    assert ops.format_dispatch_line(
        {(case, k): n for case, keys in recorded["calls"].items() for k, n in keys.items()}
    ) == line


def test_bench_prints_and_writes_the_dispatch(setup, tmp_path):
    bundle, manifest = setup
    out = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", str(manifest), "--model", str(bundle), "--device", "cpu",
                              "--batch-size", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "linear:cpu" in _line(res.output)
    dispatch = json.loads(out.read_text())["dispatch"]
    assert dispatch["cases"]["out_of_scope"] > 0 and dispatch["cases"]["kernel"] == 0


def test_gaps_run_reports_the_workload(setup):
    bundle, manifest = setup
    res = runner.invoke(app, ["gaps", "--json", "--run", str(manifest), "--model", str(bundle),
                              "--device", "cpu", "--limit", "1"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["run"]["limit"] == 1
    run = report["run"]["dispatch"]
    assert run["calls"]["out_of_scope"]["linear:cpu"] > 0
    assert report["calls"] == run["calls"]  # the table is the workload's, not the process's
    res = runner.invoke(app, ["gaps", "--run", str(manifest), "--model", str(bundle),
                              "--device", "cpu", "--limit", "1"])
    assert res.exit_code == 0, res.output
    assert "calls by case (this run)" in res.output
    _line(res.output)
