"""The gap report and the one-line dispatch summary of a run."""

from __future__ import annotations

import json

from oasr import ops
from oasr.ops.build import BuildSpec

COUNTS = {("kernel", "fbank"): 2, ("gap", "gemm"): 30, ("gap", "norm"): 10,
          ("out_of_scope", "linear:cpu"): 4, ("policy", "attention"): 1}


def test_dispatch_line_names_every_case_with_its_calls():
    line = ops.format_dispatch_line(COUNTS)
    assert line == ("dispatch (backend oasr): kernel 2 (fbank 2); gap 40 (gemm 30, norm 10); "
                    "policy 1 (attention 1); out_of_scope 4 (linear:cpu 4); torch_backend 0; "
                    "quantized 0")
    assert "\n" not in line


def test_dispatch_line_caps_the_names_per_case():
    counts = {("gap", f"g{i}"): i + 1 for i in range(6)}
    line = ops.format_dispatch_line(counts, max_names=2)
    assert "gap 21 (g5 6, g4 5, +4 more)" in line


def test_summary_and_metadata_round_trip():
    summary = ops.dispatch_summary(COUNTS)
    assert summary["total"] == 47
    assert summary["cases"] == {"kernel": 2, "gap": 40, "policy": 1, "out_of_scope": 4,
                                "torch_backend": 0, "quantized": 0}
    assert list(summary["calls"]["gap"]) == ["gemm", "norm"]  # most calls first
    meta = ops.record_dispatch({"model": "m"}, COUNTS)
    assert meta["model"] == "m"
    assert json.loads(meta[ops.DISPATCH_METADATA_KEY]) == summary


def test_gap_report_lists_gaps_kernels_and_their_state(monkeypatch):
    from oasr.ops import dispatch

    lib = BuildSpec(name="test_lib", sources=("none.cu",), signatures={})
    monkeypatch.setattr(dispatch, "buildable", lambda spec: False)
    ops.register_kernel(ops.Kernel(op="test_op", fn=print, source="tests", library=lib))
    report = ops.gap_report(COUNTS)
    gemm = next(g for g in report["declared_gaps"] if g["id"] == "gemm")
    assert gemm["calls"] == 30
    assert report["kernels"] == [{"op": "test_op", "source": "tests", "library": "test_lib",
                                  "state": "gap:cuda-toolchain"}]
    text = ops.format_gap_report(COUNTS)
    assert "test_op (tests): gap:cuda-toolchain" in text
    assert "gap            gemm: 30" in text
    assert "calls: 30" in text


def test_the_toolchain_gap_says_whether_it_holds_here(monkeypatch, tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    monkeypatch.setenv("OASR_NVCC", str(nvcc))
    assert ops.gap_here("cuda-toolchain") == f"does not apply here: nvcc found ({nvcc})"
    monkeypatch.setenv("OASR_NVCC", "off")
    assert ops.gap_here("cuda-toolchain") == (
        "applies: kernel builds are disabled (OASR_NVCC=off)")
    assert ops.gap_here("gemm") == "applies: no kernel written yet"


def test_oasr_gaps_never_says_nvcc_is_both_missing_and_found(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from oasr.cli.app import app

    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    monkeypatch.setenv("OASR_NVCC", str(nvcc))
    res = CliRunner().invoke(app, ["gaps", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    toolchain = next(g for g in report["declared_gaps"] if g["id"] == "cuda-toolchain")
    assert toolchain["here"].startswith("does not apply here: nvcc found")
    states = report["compiled_modules"].values()
    assert states and not any("not buildable here" in s for s in states)
