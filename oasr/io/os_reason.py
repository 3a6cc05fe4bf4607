"""What an I/O error says, without the path it names: messages here name the path once, and
libraries (pyarrow's above all) put it in their own text too."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["reason"]


def reason(err: BaseException, path: str | Path | None = None) -> str:
    """``err``'s cause: the system's words for its errno when it has one ("No space left on
    device"), else its text with ``path`` (quoted or not) taken out."""
    if isinstance(err, OSError) and err.errno:
        return os.strerror(err.errno)
    text = str(err)
    if path is not None:
        for form in (f" '{path}'", f"'{path}'", f" {path}", str(path)):
            text = text.replace(form, "")
    return text.strip() or type(err).__name__
