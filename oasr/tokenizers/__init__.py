"""The tokenizer axis: ``register_tokenizer`` / ``build_tokenizer``, keyed by the spec's kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oasr.registry import Registry
from oasr.tokenizers.base import Tokenizer, TokenizerSpec

TOKENIZERS: Registry[Any] = Registry("tokenizer kind", entry_point_group="oasr.tokenizers")
TOKENIZERS.register("huggingface", "oasr.tokenizers.huggingface:HuggingFaceTokenizer")
TOKENIZERS.register("whisper", "oasr.tokenizers.whisper:WhisperTokenizer")
TOKENIZERS.register("symbol_table", "oasr.tokenizers.symbol_table:SymbolTableTokenizer")
TOKENIZERS.register("sentencepiece", "oasr.tokenizers.sentencepiece:SentencePieceTokenizer")
TOKENIZERS.register("funasr_char", "oasr.tokenizers.funasr_char:FunasrCharTokenizer")


def register_tokenizer(kind: str):
    """Register a tokenizer class (with a ``from_spec(spec, folder)`` classmethod) for ``kind``."""
    return TOKENIZERS.register(kind)


def build_tokenizer(spec: TokenizerSpec, folder: str | Path) -> Tokenizer:
    return TOKENIZERS.get(spec.kind).from_spec(spec, Path(folder))


__all__ = ["TOKENIZERS", "Tokenizer", "TokenizerSpec", "build_tokenizer", "register_tokenizer"]
