"""Where the shared real-speech data lives: ``OASR_SHARED_DATA``, else ``shared/data`` beside
the repository (as CI lays it out), else the workspace copy."""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _find() -> Path:
    candidates = [os.environ.get("OASR_SHARED_DATA"), _REPO.parent / "shared" / "data",
                  "/work/shared/data"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return _REPO.parent / "shared" / "data"


SHARED_DATA = _find()
