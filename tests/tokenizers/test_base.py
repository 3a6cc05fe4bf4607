"""The base tokenizer's default incremental decoding (kinds that do not override it)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from oasr.tokenizers.base import Tokenizer


class ByteTokenizer(Tokenizer):
    """ids are UTF-8 bytes; an unfinished character decodes to U+FFFD, as byte-level BPE does."""

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class CapitalizingTokenizer(Tokenizer):
    """A decode that rewrites earlier text: the first letter is capitalised once a '.' ends."""

    def decode(self, ids: Sequence[int]) -> str:
        text = "".join(chr(i) for i in ids)
        return text.capitalize() if text.endswith(".") else text


def _stream(tok: Tokenizer, ids: list[int]) -> tuple[list[str], str]:
    out, state = [], None
    for i in ids:
        piece, state = tok.decode_incremental([i], state)
        out.append(piece)
    return out, tok.flush_incremental(state)


def test_a_split_character_goes_to_the_id_that_completes_it():
    tok = ByteTokenizer()
    ids = list("aé€b".encode())
    pieces, rest = _stream(tok, ids)
    # A half character waits (no U+FFFD) and goes out whole once completed.
    assert pieces == ["a", "", "é", "", "", "€", "b"]
    assert rest == ""
    assert tok.token_pieces(ids) == pieces
    assert "".join(pieces) == tok.decode(ids)


def test_an_unfinished_character_at_the_end_is_flushed_as_decode_renders_it():
    tok = ByteTokenizer()
    ids = list(b"ab") + [0xE2, 0x82]
    pieces, rest = _stream(tok, ids)
    assert pieces == ["a", "b", "", ""]
    assert "".join(pieces) + rest == tok.decode(ids)


def test_chunks_of_several_ids_render_the_same_text():
    tok = ByteTokenizer()
    ids = list("día 3 — 你好".encode())
    out, state = [], None
    for k in range(0, len(ids), 3):
        piece, state = tok.decode_incremental(ids[k:k + 3], state)
        out.append(piece)
    assert "".join(out) + tok.flush_incremental(state) == tok.decode(ids)


def test_a_decode_that_rewrites_rendered_text_is_refused_naming_the_fix():
    tok = CapitalizingTokenizer()
    with pytest.raises(ValueError, match="override decode_incremental"):
        _stream(tok, [ord(c) for c in "hi."])
