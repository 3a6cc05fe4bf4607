"""``oasr stream FILE --model BUNDLE -o OUT.jsonl`` through ``typer.testing``, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from oasr.cli.app import app


def stream_finals(bundle: Path, wav: Path, out: Path, *flags: str, device: str = "cpu"):
    """Stream ``wav`` on ``device`` (the CPU by default); returns the CLI result (exit code
    checked) and the finals."""
    r = CliRunner().invoke(app, ["stream", str(wav), "--model", str(bundle), "--device", device,
                                 *flags, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return r, [json.loads(x) for x in out.read_text().splitlines()]
