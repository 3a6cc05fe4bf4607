"""Listing and help import no torch: ``oasr models``, ``oasr gaps``, ``oasr --help`` and every
command's ``--help`` stay well under a second (torch alone costs about one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import sys
from typer.testing import CliRunner
from oasr.cli.app import app
result = CliRunner().invoke(app, sys.argv[1:])
assert result.exit_code == 0, result.output
heavy = sorted(m for m in ("torch", "numpy", "transformers") if m in sys.modules)
print("IMPORTED:" + ",".join(heavy))
"""

COMMANDS = [["models"], ["models", "--json"], ["gaps"], ["gaps", "--json"], ["--help"],
            ["transcribe", "--help"], ["stream", "--help"], ["bench", "--help"],
            ["convert", "--help"], ["wer", "--help"], ["gaps", "--help"], ["models", "--help"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_listing_imports_no_torch(argv):
    out = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=REPO, capture_output=True,
                         text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                         "OMP_NUM_THREADS": "1", "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr[-2000:]
    imported = out.stdout.strip().rsplit("IMPORTED:", 1)[-1]
    assert "torch" not in imported.split(","), f"oasr {' '.join(argv)} imported {imported}"
