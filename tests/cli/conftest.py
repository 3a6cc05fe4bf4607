"""What the CLI tests that run a model share: one torch thread (requested per module with
``pytestmark = pytest.mark.usefixtures("one_thread")``, so modules that do not run a model
are left alone) and the tiny random Whisper bundle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.tiny_whisper import torch_threads
from tests.transcribe.conftest import write_tiny_bundle


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A 6 s window (the runner's overlap is 5 s) is the cheapest that serves short clips.
    return write_tiny_bundle(tmp_path_factory.mktemp("bundle") / "tiny", window_s=6.0)
