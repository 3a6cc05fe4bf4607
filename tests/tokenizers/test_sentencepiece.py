"""SentencePieceTokenizer over models trained in the session (conftest.py).

Oracle: the sentencepiece library itself. ``decode`` for the text, and its offset mapping
(``decode(ids, return_type="offset_mapping")``: each id's span of the decoded text) for the
per-id pieces, which our one-pass rendering must reproduce exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oasr.tokenizers import TOKENIZERS, TokenizerSpec, build_tokenizer
from oasr.tokenizers.sentencepiece import (
    REPLACEMENT_CHAR,
    ModelFlags,
    SentencePieceState,
    SentencePieceTokenizer,
)

spm = pytest.importorskip("sentencepiece")

TEXTS = [
    "the quick brown fox",
    "  hello   world  ",
    "café über straße déjà vu",
    "你好世界 今天天气很好",
    "emoji 🙂🎉 and ✓ marks",
    "",
]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _tokenizer(path: Path) -> SentencePieceTokenizer:
    return build_tokenizer(TokenizerSpec("sentencepiece", {"model": path.name}), path.parent)


def _library_pieces(tok: SentencePieceTokenizer, ids: list[int]) -> list[str]:
    mapping = tok.processor.decode(ids, return_type="offset_mapping")
    return [mapping["text"][begin:end] for begin, end in mapping["offsets"]]


def _ids(tok: SentencePieceTokenizer) -> st.SearchStrategy[list[int]]:
    """Any id, weighted towards byte pieces (lead and continuation bytes), pieces opening with
    "▁", the meta pieces (<unk>, <s>, </s>) and slices of real encodings."""
    sp = tok.processor
    byte_ids = [i for i in range(tok.vocab_size) if sp.is_byte(i)]
    assert len(byte_ids) == 256
    word_starts = [i for i in range(tok.vocab_size) if sp.id_to_piece(i).startswith("▁")]
    encoded = [tok.encode(text) for text in TEXTS if text]
    one = st.one_of(
        st.integers(0, tok.vocab_size - 1),
        st.sampled_from(byte_ids[0x80:]),
        st.sampled_from(word_starts),
        st.sampled_from([sp.unk_id(), sp.bos_id(), sp.eos_id()]),
    )
    slices = st.sampled_from(encoded).flatmap(
        lambda ids: st.tuples(st.integers(0, len(ids)), st.integers(0, len(ids))).map(
            lambda ab: ids[min(ab) : max(ab)]
        )
    )
    parts = st.lists(st.one_of(one.map(lambda i: [i]), slices), max_size=10)
    return parts.map(lambda chunks: [i for chunk in chunks for i in chunk])


# -- loading --------------------------------------------------------------------------------
def test_registered_kind(sentencepiece_model: Path) -> None:
    assert TOKENIZERS.get("sentencepiece") is SentencePieceTokenizer
    tok = _tokenizer(sentencepiece_model)
    assert type(tok) is SentencePieceTokenizer
    assert tok.vocab_size == tok.processor.get_piece_size()


def test_from_spec_errors(sentencepiece_model: Path, tmp_path: Path) -> None:
    folder = sentencepiece_model.parent
    with pytest.raises(ValueError, match="file role 'model'"):
        build_tokenizer(TokenizerSpec("sentencepiece", {"bpe": sentencepiece_model.name}), folder)
    with pytest.raises(ValueError, match="unknown option"):
        build_tokenizer(
            TokenizerSpec("sentencepiece", {"model": sentencepiece_model.name}, {"x": 1}), folder
        )
    with pytest.raises(FileNotFoundError):
        build_tokenizer(TokenizerSpec("sentencepiece", {"model": "absent.model"}), tmp_path)


def test_flags_follow_the_training_arguments(sentencepiece_models: dict[str, Path]) -> None:
    flags = {name: _tokenizer(path).flags for name, path in sentencepiece_models.items()}
    assert flags["default"] == ModelFlags(True, True, " \u2047 ", False)
    assert flags["keep_whitespace"] == ModelFlags(True, False, " \u2047 ", False)
    assert flags["no_dummy_prefix"] == ModelFlags(False, False, " \u2047 ", False)
    assert flags["silent_unk"].unk_surface == ""


def test_model_with_denormalizer_is_refused(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a cat sat on a mat\n" * 20, encoding="utf-8")
    rules = tmp_path / "denormalize.tsv"
    rules.write_text("61\t41\n", encoding="utf-8")  # "a" -> "A" after decoding
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "den"),
        vocab_size=20,
        model_type="bpe",
        minloglevel=2,
        denormalization_rule_tsv=str(rules),
    )
    library = spm.SentencePieceProcessor(model_file=str(tmp_path / "den.model"))
    assert library.decode(library.encode("a cat")) == "A cAt"
    with pytest.raises(ValueError, match="denormalizer"):
        SentencePieceTokenizer.from_file(tmp_path / "den.model")


def test_special_ids_follow_the_library(sentencepiece_model: Path) -> None:
    tok = _tokenizer(sentencepiece_model)
    sp = tok.processor
    assert (tok.unk_id, tok.bos_id, tok.eos_id) == (sp.unk_id(), sp.bos_id(), sp.eos_id())
    assert tok.pad_id is None and sp.pad_id() == -1
    assert tok.token_to_id("<unk>") == sp.unk_id()
    assert tok.token_to_id("not a piece") is None
    assert tok.id_to_token(tok.vocab_size) is None
    assert tok.id_to_token(3) == sp.id_to_piece(3)


# -- ids <-> text -----------------------------------------------------------------------------
def test_encode_decode_are_the_library(sentencepiece_model: Path) -> None:
    tok = _tokenizer(sentencepiece_model)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == tok.processor.encode(text)
        assert tok.decode(ids) == tok.processor.decode(ids)
    assert tok.decode(tok.encode("你好世界 今天天气很好")) == "你好世界 今天天气很好"


def test_out_of_range_ids_raise(sentencepiece_model: Path) -> None:
    tok = _tokenizer(sentencepiece_model)
    for bad in (-1, tok.vocab_size):
        for call in (tok.decode, tok.token_pieces, tok.decode_incremental):
            with pytest.raises(ValueError, match="outside the vocabulary"):
                call([3, bad])


# -- pieces -------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["default", "keep_whitespace", "no_dummy_prefix", "silent_unk"])
def test_token_pieces_are_the_library_surfaces(
    sentencepiece_models: dict[str, Path], variant: str
) -> None:
    tok = _tokenizer(sentencepiece_models[variant])

    @FAST
    @given(_ids(tok))
    def check(ids: list[int]) -> None:
        pieces = tok.token_pieces(ids)
        assert pieces == _library_pieces(tok, ids)
        assert "".join(pieces) == tok.decode(ids)

    check()


def test_byte_fallback_character_goes_to_its_last_byte(sentencepiece_model: Path) -> None:
    tok = _tokenizer(sentencepiece_model)
    ids = tok.encode("a🙂")  # the emoji is not in the training text: four byte pieces
    bytes_ = [tok.id_to_token(i) for i in ids[-4:]]
    assert bytes_ == [f"<0x{b:02X}>" for b in "🙂".encode()]
    assert tok.token_pieces(ids)[-4:] == ["", "", "", "🙂"]
    # Cut inside the character: each byte of the unfinished character shows "\ufffd" (one per
    # byte, sentencepiece's rule) on its own id.
    assert tok.decode(ids[:-1]).endswith(REPLACEMENT_CHAR * 3)
    assert tok.token_pieces(ids[:-1])[-3:] == [REPLACEMENT_CHAR] * 3


def test_leading_word_start_is_dropped_once_text_begins(
    sentencepiece_models: dict[str, Path],
) -> None:
    default = _tokenizer(sentencepiece_models["default"])
    keep = _tokenizer(sentencepiece_models["keep_whitespace"])
    space = default.token_to_id("▁")
    assert space is not None and keep.token_to_id("▁") == space
    # "hello" as pieces with no word-start mark ("▁" is a piece of its own in these models).
    hello = [default.token_to_id(p) for p in ("he", "l", "l", "o")]
    assert None not in hello and [keep.token_to_id(p) for p in ("he", "l", "l", "o")] == hello
    # remove_extra_whitespaces: every "▁" before the text begins renders as nothing.
    assert default.token_pieces([space, space, *hello]) == ["", "", "he", "l", "l", "o"]
    assert default.decode([space, space, *hello]) == "hello"
    # Extra whitespace kept: only the first "▁" is the dummy prefix.
    assert keep.token_pieces([space, space, *hello]) == ["", " ", "he", "l", "l", "o"]
    assert keep.decode([space, space, *hello]) == " hello"
    # Once the text has begun, a word start is a space.
    assert default.token_pieces([*hello, space, *hello])[4] == " "


def test_token_pieces_make_no_library_decode_call(
    sentencepiece_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tok = _tokenizer(sentencepiece_model)
    ids = [i for text in TEXTS for i in tok.encode(text)] * 20
    expected = tok.decode(ids)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("token_pieces re-decoded")

    for name in ("decode", "Decode", "decode_ids", "DecodeIds"):
        monkeypatch.setattr(tok.processor, name, refuse)
    assert "".join(tok.token_pieces(ids)) == expected


# -- streaming --------------------------------------------------------------------------------
def test_decode_incremental_random_chunks(sentencepiece_models: dict[str, Path]) -> None:
    toks = [_tokenizer(path) for path in sentencepiece_models.values()]

    @FAST
    @given(
        st.sampled_from(toks).flatmap(lambda tok: st.tuples(st.just(tok), _ids(tok))),
        st.lists(st.integers(1, 4), min_size=1, max_size=10),
    )
    def check(tok_ids: tuple[SentencePieceTokenizer, list[int]], sizes: list[int]) -> None:
        tok, ids = tok_ids
        out: list[str] = []
        state: SentencePieceState | None = None
        pos = k = 0
        while pos < len(ids):
            size = sizes[k % len(sizes)]
            text, state = tok.decode_incremental(ids[pos : pos + size], state)
            out.append(text)
            pos, k = pos + size, k + 1
        assert "".join(out) + tok.flush_incremental(state) == tok.decode(ids)
        # Only an unfinished character is held back, never more than three bytes of it.
        assert state is None or len(state.pending) <= 3

    check()


def test_decode_incremental_holds_an_unfinished_character(sentencepiece_model: Path) -> None:
    tok = _tokenizer(sentencepiece_model)
    ids = tok.encode("a🙂")
    first, state = tok.decode_incremental(ids[:-1])
    assert first == "a" and len(state.pending) == 3
    rest, state = tok.decode_incremental(ids[-1:], state)
    assert rest == "🙂" and state.pending == () and not state.at_start
    assert tok.flush_incremental(state) == ""
    assert tok.decode_incremental([]) == ("", SentencePieceState())
