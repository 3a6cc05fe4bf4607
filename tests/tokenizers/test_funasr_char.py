"""The ``funasr_char`` tokenizer: FunASR token lists, piece-local rendering."""

from __future__ import annotations

import json

import pytest

from oasr.tokenizers import TokenizerSpec, build_tokenizer
from oasr.tokenizers.funasr_char import FunasrCharTokenizer

TOKENS = ["<blank>", "<s>", "</s>", "你", "好", "he@@", "llo", "world", "<unk>"]


@pytest.mark.parametrize("name", ["tokens.json", "tokens.txt"])
def test_reads_both_layouts_through_the_spec(tmp_path, name):
    body = json.dumps(TOKENS) if name.endswith(".json") else "\n".join(TOKENS) + "\n"
    (tmp_path / name).write_text(body, encoding="utf-8")
    tok = build_tokenizer(TokenizerSpec("funasr_char", {"tokens": name}), tmp_path)
    assert tok.vocab_size == len(TOKENS) and tok.id_to_token(5) == "he@@"


def test_rendering_and_pieces_join_to_decode():
    tok = FunasrCharTokenizer(TOKENS)
    ids = [1, 3, 4, 5, 6, 7, 0, 3, 2]
    assert tok.decode(ids) == "你好hello world你"
    pieces = tok.token_pieces(ids)
    assert "".join(pieces) == tok.decode(ids) and pieces[4] == "llo" and pieces[5] == " world"
    text, state = tok.decode_incremental(ids[:5])
    rest, _ = tok.decode_incremental(ids[5:], state)
    assert text + rest == tok.decode(ids)


def test_encode_and_refusals():
    tok = FunasrCharTokenizer(TOKENS)
    assert tok.encode("你好 world") == [3, 4, 7]
    with pytest.raises(ValueError, match="not a token"):
        tok.encode("猫")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([99])
