"""Where the shared real-speech data lives: ``OASR_SHARED_DATA``, else ``shared/data`` beside
the repository (as CI lays it out), else the workspace copy."""

from __future__ import annotations

from pathlib import Path

from oasr import envs

_REPO = Path(__file__).resolve().parents[2]


def _find() -> Path:
    candidates = [envs.shared_data(), _REPO.parent / "shared" / "data",
                  "/work/shared/data"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return _REPO.parent / "shared" / "data"


SHARED_DATA = _find()
