"""The tokenizer axis' base: ids <-> text, and the pieces word timings are cut from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenizerSpec:
    """What a converter emits: the tokenizer kind and its files (relative to ``tokenizer/``)."""

    kind: str
    files: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


REPLACEMENT_CHAR = "\ufffd"  # what a decoder renders for an unfinished UTF-8 sequence


@dataclass
class PrefixDecodeState:
    """The default ``decode_incremental`` state: the ids so far and the text handed out."""

    ids: list[int] = field(default_factory=list)
    emitted: str = ""


class Tokenizer:
    """Base tokenizer. ``token_pieces`` must concatenate to exactly ``decode(ids)``."""

    kind: str = ""

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def decode_incremental(self, ids: Sequence[int], state: Any = None
                           ) -> tuple[str, PrefixDecodeState]:
        """Render the text ``ids`` append to what ``state`` has rendered so far.

        The default re-decodes the whole sequence (quadratic); kinds whose rendering is
        piece-local or anchored override it. Text ending in an unfinished character
        (``"\ufffd"``) is held back until the id completing it arrives, so every returned
        text is an append: joined with ``flush_incremental`` it equals ``decode(ids)``.

        Raises:
            ValueError: ``decode`` of the longer sequence changes text already rendered (not an
                unfinished character): such a kind must override this method.
        """
        prev = state if isinstance(state, PrefixDecodeState) else PrefixDecodeState()
        now = PrefixDecodeState(prev.ids + list(ids), prev.emitted)
        stable = self.decode(now.ids).rstrip(REPLACEMENT_CHAR)
        if not stable.startswith(prev.emitted):
            raise ValueError(
                f"{type(self).__name__}.decode rewrites text already rendered "
                f"({prev.emitted!r} -> {stable!r}); override decode_incremental for this "
                "tokenizer kind"
            )
        piece = stable[len(prev.emitted):]
        now.emitted = prev.emitted + piece
        return piece, now

    def flush_incremental(self, state: Any) -> str:
        """At the end of a stream: text ``decode_incremental`` held back (an unfinished
        character the stream never completed renders as ``decode`` renders it)."""
        if not isinstance(state, PrefixDecodeState) or not state.ids:
            return ""
        return self.decode(state.ids)[len(state.emitted):]

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """One string per id; ``"".join(token_pieces(ids)) == decode(ids)`` exactly.

        A piece holds exactly the characters its id contributes to the text: a character split
        across ids goes to the id that completes it, an id that renders nothing gets "". Word
        timings cut words out of the joined pieces (docs/tokenizers.md). This default streams
        through ``decode_incremental``; kinds override it with one pass.
        """
        pieces: list[str] = []
        state: Any = None
        for i in ids:
            piece, state = self.decode_incremental([i], state)
            pieces.append(piece)
        return pieces
