"""The ``funasr_char`` tokenizer kind: FunASR's ``tokens.json`` (a JSON list) or ``tokens.txt``
(one token a line), the id being the position.

Rendering is piece-local, as FunASR's char tokenizer and ``sentence_postprocess`` render a
Paraformer's output: special tokens (``<blank>``, ``<s>``, ``</s>``, ``<unk>``) render as "";
a token ending in ``@@`` is a word piece (rendered without the mark, the next token continues
the word); a Latin token that starts a word after another Latin word gets one space before it;
any other token (a CJK character) renders as itself with no space.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oasr.tokenizers.base import Tokenizer, TokenizerSpec

__all__ = ["FunasrCharTokenizer", "read_funasr_tokens"]

SPECIAL = ("<blank>", "<s>", "</s>", "<unk>")
CONTINUES = "@@"


def read_funasr_tokens(path: Path) -> list[str]:
    """tokens.json (a JSON list of strings) or tokens.txt (one token a line)."""
    if path.suffix == ".json":
        tokens = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"{path}: expected a JSON list of token strings")
    else:
        tokens = [line.rstrip("\r") for line in path.read_text(encoding="utf-8").split("\n")]
        while tokens and not tokens[-1]:
            tokens.pop()
    if not tokens:
        raise ValueError(f"{path}: no tokens")
    return tokens


def _latin(text: str) -> bool:
    return bool(text) and all(ord(c) < 0x2E80 for c in text)


class FunasrCharTokenizer(Tokenizer):
    """ids <-> FunASR char / word-piece tokens. State between pieces: (previous kind)."""

    kind = "funasr_char"
    FILE_ROLES = ("tokens",)

    def __init__(self, tokens: Sequence[str]) -> None:
        self._tokens = list(tokens)
        self._ids = {t: i for i, t in enumerate(self._tokens)}

    @classmethod
    def from_spec(cls, spec: TokenizerSpec, folder: Path) -> FunasrCharTokenizer:
        if set(spec.files) != {"tokens"} or spec.options:
            raise ValueError(f"a funasr_char tokenizer takes the file role 'tokens' and no "
                             f"options; the spec names {sorted(spec.files)}, {spec.options}")
        path = Path(folder) / spec.files["tokens"]
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file for role 'tokens' not found: {path}")
        return cls(read_funasr_tokens(path))

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def id_to_token(self, token_id: int) -> str:
        return self._tokens[token_id]

    def encode(self, text: str) -> list[int]:
        """Characters and space-separated Latin words that are whole tokens; anything else
        raises (word-piece encoding needs FunASR's segmenter, which is not part of the list)."""
        out: list[int] = []
        for word in text.split():
            if word in self._ids:
                out.append(self._ids[word])
                continue
            for ch in word:
                if ch not in self._ids:
                    raise ValueError(f"{ch!r} of {word!r} is not a token of this vocabulary")
                out.append(self._ids[ch])
        return out

    def _piece(self, token_id: int, prev: str) -> tuple[str, str]:
        """(text, kind after it); kinds: "" start, "cjk", "latin", "cont" (inside a word)."""
        if not 0 <= token_id < len(self._tokens):
            raise ValueError(f"token id {token_id} outside the vocabulary ({len(self._tokens)})")
        tok = self._tokens[token_id]
        if tok in SPECIAL:
            return "", prev
        cont = tok.endswith(CONTINUES) and len(tok) > len(CONTINUES)
        body = tok[:-len(CONTINUES)] if cont else tok
        latin = _latin(body)
        space = " " if latin and prev == "latin" else ""
        return space + body, "cont" if cont else ("latin" if latin else "cjk")

    def decode_incremental(self, ids: Sequence[int], state: Any = None) -> tuple[str, str]:
        prev = state if isinstance(state, str) else ""
        out = []
        for i in ids:
            piece, prev = self._piece(int(i), prev)
            out.append(piece)
        return "".join(out), prev

    def flush_incremental(self, state: Any) -> str:
        return ""

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        prev, pieces = "", []
        for i in ids:
            piece, prev = self._piece(int(i), prev)
            pieces.append(piece)
        return pieces

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.token_pieces(ids))
