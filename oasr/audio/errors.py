"""The one error audio input raises, and how a source is named in it."""

from __future__ import annotations

import os
from typing import Union

# A path, or the encoded file's bytes (WAV, FLAC, MP3, ... as stored on disk).
AudioSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


def describe_source(source: AudioSource) -> str:
    """How errors name a source: the path as given, or ``<bytes, N bytes>``."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<bytes, {memoryview(source).nbytes} bytes>"
    return os.fspath(source)


class AudioDecodeError(ValueError):
    """A recording that cannot be turned into samples.

    The message reads ``"<source>: <problem>; <fix>"``; the three parts are also kept as
    attributes so a caller (the manifest runner) can file them in an output row's ``error``.
    """

    def __init__(self, source: str, problem: str, fix: str) -> None:
        self.source = source
        self.problem = problem
        self.fix = fix
        super().__init__(f"{source}: {problem}; {fix}")
