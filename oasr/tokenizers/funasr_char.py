"""The ``funasr_char`` tokenizer kind: FunASR's ``tokens.json`` (a JSON list) or ``tokens.txt``
(one token a line), the id being the position.

Rendering is FunASR's: ``sentence_postprocess`` over the tokens (``funasr_sentence``): specials
dropped, word pieces (``@@``) joined, Latin words spaced, spelled letters joined and
upper-cased (``x j`` -> ``XJ``). That last rule rewrites text already rendered when the next
letter arrives, so incremental decoding re-renders the whole prefix (the base class's).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from oasr.tokenizers.base import Tokenizer, TokenizerSpec
from oasr.tokenizers.funasr_sentence import sentence_pieces

__all__ = ["FunasrCharTokenizer", "read_funasr_tokens"]


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


class FunasrCharTokenizer(Tokenizer):
    """ids <-> FunASR char / word-piece tokens."""

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

    def _token_strings(self, ids: Sequence[int]) -> list[str]:
        out = []
        for i in ids:
            if not 0 <= int(i) < len(self._tokens):
                raise ValueError(f"token id {i} outside the vocabulary ({len(self._tokens)})")
            out.append(self._tokens[int(i)])
        return out

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        return sentence_pieces(self._token_strings(ids))

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.token_pieces(ids))
