"""The ``funasr_char`` tokenizer: FunASR token lists, rendered as FunASR's
``sentence_postprocess`` renders them (checked against funasr's own function)."""

from __future__ import annotations

import json
import random

import pytest

from oasr.tokenizers import TokenizerSpec, build_tokenizer
from oasr.tokenizers.funasr_char import FunasrCharTokenizer
from oasr.tokenizers.funasr_sentence import sentence_pieces, sentence_text

TOKENS = ["<blank>", "<s>", "</s>", "你", "好", "he@@", "llo", "world", "<unk>"]
# Tokens that reach every branch of FunASR's rules: letters (spelled-out runs), word pieces, CJK,
# digits (FunASR counts them as Chinese), an apostrophe word, punctuation, specials, spaces.
TRICKY = ["a", "b", "x", "j", "he@@", "llo", "world", "it's", "你", "好", "12", "3", "@@", ".",
          "<unk>", "<s>", "</s>", "<blank>", " ", "A", "ab@@", "'", "é", "z@@", " k", "<OOV>",
          "，"]
CRAFTED = [
    (["x", "j", "hello"], "XJ hello"),
    (["he@@", "llo", "x", "j"], "hello XJ"),
    (["你", "好", "x", "j", "k", "的"], "你好XJK的"),
    (["x", "<unk>", "j"], "XJ"),
    (["it's", "a", "b"], "it's AB"),
    (["a", ".", "b", "c"], "a .BC"),
    (["a", "b@@"], "a"),  # a trailing word piece is dropped, as FunASR drops it
    (["<s>", "</s>"], ""),
]


def _funasr():
    pytest.importorskip("funasr", reason="pip install --no-deps funasr==1.4.16")
    from funasr.utils.postprocess_utils import sentence_postprocess

    return sentence_postprocess


@pytest.mark.parametrize("name", ["tokens.json", "tokens.txt"])
def test_reads_both_layouts_through_the_spec(tmp_path, name):
    body = json.dumps(TOKENS) if name.endswith(".json") else "\n".join(TOKENS) + "\n"
    (tmp_path / name).write_text(body, encoding="utf-8")
    tok = build_tokenizer(TokenizerSpec("funasr_char", {"tokens": name}), tmp_path)
    assert tok.vocab_size == len(TOKENS) and tok.id_to_token(5) == "he@@"


@pytest.mark.parametrize(("tokens", "text"), CRAFTED)
def test_crafted_sequences_render_as_funasr(tokens, text):
    assert sentence_text(tokens) == text
    assert _funasr()(list(tokens))[0] == text


def test_random_sequences_render_as_funasr():
    reference = _funasr()
    rng = random.Random(0)
    for _ in range(3000):
        tokens = [rng.choice(TRICKY) for _ in range(rng.randint(0, 9))]
        assert sentence_text(tokens) == reference(list(tokens))[0], tokens


def test_pieces_join_to_decode_and_follow_their_tokens():
    tok = FunasrCharTokenizer(TOKENS + ["x", "j"])
    ids = [1, 3, 4, 5, 6, 7, 0, 3, 2]
    # A stray <blank> is FunASR's "other" token: the CJK after it pops it, not the space.
    assert tok.decode(ids) == "你好hello world 你"
    pieces = tok.token_pieces(ids)
    assert "".join(pieces) == tok.decode(ids) and pieces[4] == "llo" and pieces[5] == " world"
    assert sentence_pieces(["he@@", "llo", "x", "j"]) == ["he", "llo", " X", "J"]
    # FunASR writes "." before the word that a pending piece begins: the piece's "a" goes
    # with the token it follows in the text.
    assert sentence_pieces(["a@@", ".", "b"]) == ["", ".a", "b"]


def test_encode_and_refusals():
    tok = FunasrCharTokenizer(TOKENS)
    assert tok.encode("你好 world") == [3, 4, 7]
    with pytest.raises(ValueError, match="not a token"):
        tok.encode("猫")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([99])
