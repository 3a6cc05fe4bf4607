"""SIGTERM handled as Ctrl-C: a run stopped by ``kill`` (a scheduler's pre-emption, a container
stop) keeps its finished rows, exactly as an interrupted one does.

Inside :func:`terminate_as_interrupt`, SIGTERM raises :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread, so the ``except``/``finally`` that flush the output on
Ctrl-C run for it too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Terminated", "terminate_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _raise(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM -> :class:`Terminated` while inside; the previous handler after. A no-op off the
    main thread (Python delivers signals only there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
