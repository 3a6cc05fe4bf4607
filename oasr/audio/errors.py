"""The one error audio input raises, and how a source is named in it."""

from __future__ import annotations

import os
from typing import Union

# A path, or the encoded file's bytes (WAV, FLAC, MP3, ... as stored on disk).
AudioSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


def printable(text: str) -> str:
    """``text`` as any UTF-8 writer can write it. A file name or manifest byte that is not
    UTF-8 reaches Python as a surrogate escape (U+DC80-U+DCFF): shown as ``\\xNN``, the byte
    it stands for; any other lone surrogate (a JSON ``"\\ud800"``) as U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(
            f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff"
            else "\ufffd" if "\ud800" <= c <= "\udfff" else c
            for c in text)
    return text


def describe_source(source: AudioSource) -> str:
    """How errors name a source: the path as given (see :func:`printable`), or
    ``<bytes, N bytes>``."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<bytes, {memoryview(source).nbytes} bytes>"
    return printable(os.fspath(source))


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
