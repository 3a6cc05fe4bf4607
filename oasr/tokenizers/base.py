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

    def decode_incremental(self, ids: Sequence[int], state: Any = None) -> tuple[str, Any]:
        """Render the text ``ids`` append to what ``state`` has rendered so far.

        The default re-decodes the prefix (quadratic); kinds whose rendering is piece-local or
        anchored override it. Returns (new text, new state); ``state`` is the ids so far.
        """
        prev: list[int] = list(state or [])
        before = self.decode(prev)
        now = prev + list(ids)
        after = self.decode(now)
        if not after.startswith(before):
            # A multi-byte piece completed or merged: the caller sees the whole rewrite.
            return after[len(before):] if len(after) >= len(before) else "", now
        return after[len(before):], now

    def flush_incremental(self, state: Any) -> str:
        """At the end of a stream: text ``decode_incremental`` held back (none, by default)."""
        return ""

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
