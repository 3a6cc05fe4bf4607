"""SymbolTableTokenizer: WeNet ``units.txt`` / k2 ``tokens.txt`` unit lists written here.

Oracle for the rendering: the recipe the toolkits state for their unit lists (join the units,
"▁" -> space, specials removed, no leading space), applied in the test to the whole sequence
at once; the tokenizer must agree piece by piece and as a stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oasr.tokenizers import TOKENIZERS, TokenizerSpec, build_tokenizer
from oasr.tokenizers.symbol_table import (
    DEFAULT_SPECIAL_UNITS,
    SymbolTableTokenizer,
    read_symbol_table,
)

# A WeNet-style mixed table: CTC blank first, <sos/eos> last, English BPE units with "▁",
# CJK characters without it, a noise marker the spec declares special.
WENET_UNITS = [
    "<blank>", "<unk>", "<noise>", "▁", "▁THE", "▁HE", "LLO", "▁HELLO", "▁WORLD", "L", "O",
    "▁A", "▁CAT", "S", "你", "好", "世", "界", "▁你好", "'", "▁IT", "'S", "<sos/eos>",
]  # fmt: skip
K2_UNITS = ["<blk>", "<sos/eos>", "<unk>", "▁HI", "▁THERE", "S"]
FAST = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))


def _write(folder: Path, units: list[str], name: str = "units.txt") -> Path:
    path = folder / name
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return path


@pytest.fixture
def wenet(tmp_path: Path) -> SymbolTableTokenizer:
    _write(tmp_path, WENET_UNITS)
    spec = TokenizerSpec("symbol_table", {"units": "units.txt"}, {"special_units": ["<noise>"]})
    return build_tokenizer(spec, tmp_path)


def _oracle(units: list[str], ids: list[int], special: set[str]) -> str:
    return "".join(units[i] for i in ids if units[i] not in special).replace("▁", " ").lstrip()


# -- the file -------------------------------------------------------------------------------
def test_read_symbol_table(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("<blk> 0\n\n▁A\t1\n你 3\r\n", encoding="utf-8")
    assert read_symbol_table(path) == {0: "<blk>", 1: "▁A", 3: "你"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("a 0\nb\n", "expected '<unit> <id>'"),
        ("a 0\nb x\n", "expected '<unit> <id>'"),
        ("a 0\nb -1\n", "negative id"),
        ("a 0\nb 0\n", "id 0 already names 'a'"),
        ("a 0\na 1\n", "unit 'a' already has id 0"),
        ("\n\n", "no units"),
    ],
)
def test_read_symbol_table_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "units.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_symbol_table(path)


def test_registered_kind_and_spec_errors(tmp_path: Path) -> None:
    assert TOKENIZERS.get("symbol_table") is SymbolTableTokenizer
    _write(tmp_path, WENET_UNITS)
    with pytest.raises(ValueError, match="file role 'units'"):
        build_tokenizer(TokenizerSpec("symbol_table", {"tokens": "units.txt"}), tmp_path)
    with pytest.raises(ValueError, match="unknown option"):
        build_tokenizer(
            TokenizerSpec("symbol_table", {"units": "units.txt"}, {"blank": "<b>"}), tmp_path
        )
    with pytest.raises(FileNotFoundError):
        build_tokenizer(TokenizerSpec("symbol_table", {"units": "absent.txt"}), tmp_path)
    with pytest.raises(TypeError, match="list of units"):
        SymbolTableTokenizer({0: "a"}, special_units="<noise>")


# -- vocabulary -------------------------------------------------------------------------------
def test_special_ids_wenet(wenet: SymbolTableTokenizer) -> None:
    assert wenet.vocab_size == len(WENET_UNITS)
    assert wenet.blank_id == WENET_UNITS.index("<blank>")
    assert wenet.unk_id == WENET_UNITS.index("<unk>")
    assert wenet.sos_id == wenet.eos_id == WENET_UNITS.index("<sos/eos>")
    assert wenet.token_to_id("▁CAT") == WENET_UNITS.index("▁CAT")
    assert wenet.id_to_token(4) == WENET_UNITS[4]
    assert wenet.units == dict(enumerate(WENET_UNITS))
    assert wenet.is_special(2) and not wenet.is_special(3)


def test_special_ids_k2_and_absent(tmp_path: Path) -> None:
    k2 = SymbolTableTokenizer.from_file(_write(tmp_path, K2_UNITS, "tokens.txt"))
    assert (k2.blank_id, k2.sos_id, k2.eos_id, k2.unk_id) == (0, 1, 1, 2)
    bare = SymbolTableTokenizer({0: "a", 1: "<sos>", 2: "<eos>"})
    assert (bare.blank_id, bare.unk_id, bare.sos_id, bare.eos_id) == (None, None, 1, 2)


def test_gaps_and_out_of_range_ids_raise(tmp_path: Path) -> None:
    tok = SymbolTableTokenizer({0: "<blank>", 1: "▁A", 5: "B"})
    assert tok.vocab_size == 6
    assert tok.decode([1, 5]) == "AB"
    with pytest.raises(ValueError, match="not listed"):
        tok.decode([1, 3])
    for bad in (-1, 6):
        for call in (tok.decode, tok.token_pieces, tok.decode_incremental):
            with pytest.raises(ValueError, match="outside the vocabulary"):
                call([bad])


# -- rendering --------------------------------------------------------------------------------
def test_rendering_rules(wenet: SymbolTableTokenizer) -> None:
    ids = [WENET_UNITS.index(u) for u in ["<blank>", "▁HE", "LLO", "<noise>", "▁WORLD", "你",
                                          "好", "▁IT", "'S", "<sos/eos>"]]  # fmt: skip
    assert wenet.token_pieces(ids) == [
        "", "HE", "LLO", "", " WORLD", "你", "好", " IT", "'S", "",
    ]  # fmt: skip
    assert wenet.decode(ids) == "HELLO WORLD你好 IT'S"
    # Only the opening spaces go: lone "▁" units before the text, and the first unit's "▁".
    space, a = WENET_UNITS.index("▁"), WENET_UNITS.index("▁A")
    assert wenet.token_pieces([space, space, a, space, a]) == ["", "", "A", " ", " A"]
    # A unit the spec does not declare special renders as itself.
    plain = SymbolTableTokenizer(dict(enumerate(WENET_UNITS)))
    assert plain.decode([2, a]) == "<noise> A"
    assert set(DEFAULT_SPECIAL_UNITS) >= {"<blank>", "<unk>", "<sos/eos>", "<sos>", "<eos>"}


def test_token_pieces_random_ids(wenet: SymbolTableTokenizer) -> None:
    special = set(DEFAULT_SPECIAL_UNITS) | {"<noise>"}

    @FAST
    @given(st.lists(st.integers(0, wenet.vocab_size - 1), max_size=30))
    def check(ids: list[int]) -> None:
        pieces = wenet.token_pieces(ids)
        assert len(pieces) == len(ids)
        assert "".join(pieces) == wenet.decode(ids) == _oracle(WENET_UNITS, ids, special)
        for k in range(len(ids)):  # piece-local: every prefix renders as its pieces
            assert "".join(pieces[: k + 1]) == wenet.decode(ids[: k + 1])

    check()


def test_decode_incremental_random_chunks(wenet: SymbolTableTokenizer) -> None:
    @FAST
    @given(
        st.lists(st.integers(0, wenet.vocab_size - 1), max_size=30),
        st.lists(st.integers(1, 5), min_size=1, max_size=8),
    )
    def check(ids: list[int], sizes: list[int]) -> None:
        out: list[str] = []
        state: bool | None = None
        pos = k = 0
        while pos < len(ids):
            text, state = wenet.decode_incremental(ids[pos : pos + sizes[k % len(sizes)]], state)
            out.append(text)
            pos, k = pos + sizes[k % len(sizes)], k + 1
        assert "".join(out) + wenet.flush_incremental(state) == wenet.decode(ids)

    check()


# -- encode -----------------------------------------------------------------------------------
def test_encode_greedy_longest_match(wenet: SymbolTableTokenizer) -> None:
    def units(text: str) -> list[str]:
        return [WENET_UNITS[i] for i in wenet.encode(text)]

    assert units("HELLO WORLD") == ["▁HELLO", "▁WORLD"]  # not "▁HE" + "LLO"
    assert units("HELLOS") == ["▁HELLO", "S"]
    assert units("IT'S") == ["▁IT", "'S"]
    assert units("你好世界") == ["▁你好", "世", "界"]
    assert units("世界") == ["▁", "世", "界"]  # "▁" is a unit: the word start is kept
    assert units("THE CATS") == ["▁THE", "▁CAT", "S"]
    assert units("HEX") == ["▁HE", "<unk>"]
    assert wenet.encode("") == wenet.encode("   ") == []
    for text in ("HELLO WORLD", "THE CATS", "你好世界", "IT'S A CAT"):
        assert wenet.decode(wenet.encode(text)) == text


def test_encode_without_word_start_units_and_without_unk() -> None:
    chars = SymbolTableTokenizer(dict(enumerate(["<blank>", "你", "好", "世", "界", "你好"])))
    assert chars.encode("你好 世界") == [5, 3, 4]  # char tables: no word marks, spaces dropped
    assert chars.decode(chars.encode("你好 世界")) == "你好世界"
    with pytest.raises(ValueError, match="no <unk>"):
        chars.encode("你们")
    # Special units are never produced by encode, even when the text spells them.
    assert 0 not in SymbolTableTokenizer({0: "<blank>", 1: "<unk>", 2: "b"}).encode("<blank>")
    # A word whose start has no "▁" unit is matched bare.
    mixed = SymbolTableTokenizer(dict(enumerate(["▁A", "B", "C"])))
    assert mixed.encode("A BC") == [0, 1, 2]
    assert mixed.decode([0, 1, 2]) == "ABC"


def test_literal_units_render_as_themselves() -> None:
    """k2 / icefall's tokens.txt decoding (pretrained.py) prints every symbol, ``<unk>`` too."""
    units = {0: "<blk>", 1: "<sos/eos>", 2: "<unk>", 3: "\u2581A", 4: "B", 5: "\u2581"}
    plain = SymbolTableTokenizer(units)
    icefall = SymbolTableTokenizer(units, literal_units=["<blk>", "<unk>", "<sos/eos>"])
    ids = [3, 2, 4, 1, 5, 3]
    assert plain.decode(ids) == "AB  A"
    assert icefall.decode(ids) == "A<unk>B<sos/eos>  A"
    assert not icefall.is_special(2) and plain.is_special(2)
    with pytest.raises(TypeError, match="literal_units is a list"):
        SymbolTableTokenizer(units, literal_units="<unk>")
