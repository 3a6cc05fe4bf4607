"""The command tree through Typer's runner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from oasr.cli.app import app

runner = CliRunner()


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for cmd in ("gaps", "models", "wer"):
        assert cmd in result.output


def test_gaps_json_reports_backend_gaps_modules_and_device():
    result = runner.invoke(app, ["gaps", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["backend"] in ("oasr", "torch")
    ids = {g["id"] for g in report["declared_gaps"]}
    assert {"gemm", "norm", "fmha", "ctc-beam-width", "features-large-fft"} <= ids
    paged = next(k for k in report["kernels"] if k["op"] == "paged_attention")
    assert paged["source"] == "oasr/csrc/kernels/attention/paged_decode.cu"
    assert paged["library"] == "paged_decode"
    assert paged["state"] in ("kernel", "gap:cuda-toolchain")
    assert "oasr._C" in report["compiled_modules"]
    for lib in ("ctc_cuda", "features_cuda", "paged_decode", "rnn_cuda"):  # built or why not
        assert report["compiled_modules"][f"cuda:{lib}"]
    assert "cuda" in report["device"]
    assert "OASR_LAYERS_BACKEND" in report["env"]


def test_gaps_table_lists_the_kernel_libraries_and_their_state():
    result = runner.invoke(app, ["gaps"])
    assert result.exit_code == 0, result.output
    assert "declared kernel gaps" in result.output
    assert "compiled kernel modules" in result.output
    assert "cuda:ctc_cuda" in result.output and "paged_attention" in result.output


def test_models_lists_registered_architectures():
    from oasr.models.registry import list_models

    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["architectures"]
    assert [r["architecture"] for r in rows] == [e.name for e in list_models()]


def test_models_says_so_when_none_are_registered(monkeypatch):
    import oasr.models.registry as reg

    monkeypatch.setattr(reg, "list_models", lambda: [])
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    assert "no architectures are registered" in result.output
