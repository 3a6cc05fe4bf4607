"""A decode family's streaming session: its search continued across an encoder's chunks.

A family that streams chunk-wise declares its session class on its strategy
(``DecodeStrategy.streaming_session``, checked when the strategy class is defined); that one
declaration is all a new streaming family adds. The chunk-wise stream policy
(``oasr.streaming.chunkwise``) builds the session once per recognizer from the engine's strategy
(``session_cls(strategy)``: the family's model, options and conditioning) and drives it:

- ``new_search()``: one stream's search, a ``StreamSearch``;
- ``feed(searches, out, out_lens, languages)``: advance a cohort's searches by one step's
  encoder output ``out`` (B, T', C), row ``b`` the next ``out_lens[b]`` frames of
  ``searches[b]``'s stream, conditioned on ``languages[b]`` where the session acts on it;
- ``conditions``: the stream options the session acts on (``language``); the policy refuses the
  others before a stream opens.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:  # the declaration is checked where torch is not imported yet
    import torch

__all__ = ["StreamSearch", "StreamingSession"]


class StreamSearch(Protocol):
    """One stream's search. ``best()`` is the current best hypothesis (``tokens``, ``frames``:
    each token's encoder frame from the utterance's start, ``probs``: its posterior there);
    ``stable_prefix()`` the number of its tokens no later frame can change; ``reset()`` starts
    the next utterance."""

    def best(self) -> Any: ...

    def stable_prefix(self) -> int: ...

    def reset(self) -> None: ...


class StreamingSession(ABC):
    """Built from a strategy; refuses, with the fix, an options set it cannot stream."""

    name: ClassVar[str] = ""
    conditions: tuple[str, ...] = ()

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    @abstractmethod
    def new_search(self) -> StreamSearch: ...

    @abstractmethod
    def feed(self, searches: list[Any], out: torch.Tensor, out_lens: torch.Tensor,
             languages: list[str | None]) -> None: ...


def check_streaming_session(owner: str, session: Any) -> None:
    """A strategy's ``streaming_session`` declaration: ``None`` or a ``StreamingSession``
    subclass with a name."""
    if session is None:
        return
    if not (isinstance(session, type) and issubclass(session, StreamingSession)):
        raise TypeError(f"{owner}.streaming_session must be a StreamingSession subclass or "
                        f"None, got {session!r}")
    if not session.name:
        raise TypeError(f"{owner}.streaming_session {session.__name__} declares no name")
