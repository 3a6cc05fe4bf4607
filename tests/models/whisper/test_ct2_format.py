"""The CTranslate2 header reader bounds everything a crafted model.bin declares by the file:
counts, ranks, sizes, duplicate names and alias chains (the well-formed files are
test_converters.py's)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from oasr.models.whisper.ct2_format import (
    MAX_ALIAS_HOPS,
    MAX_RANK,
    Ct2FormatError,
    read_ct2_header,
)


def _string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _model_bin(path: Path, variables: list[tuple[str, tuple[int, ...]]],
               aliases: list[tuple[str, str]] = ()) -> Path:
    """float32 variables of the given shapes (zeros) and aliases, as version 6 writes them."""
    out = struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<II", 1, len(variables))
    for name, shape in variables:
        n = 4
        for d in shape:
            n *= d
        out += _string(name) + bytes([len(shape)]) + b"".join(struct.pack("<I", d) for d in shape)
        out += bytes([0]) + struct.pack("<I", n) + b"\0" * n
    out += struct.pack("<I", len(aliases)) + b"".join(_string(a) + _string(t)
                                                      for a, t in aliases)
    path.write_bytes(out)
    return path


def test_a_well_formed_file_reads(tmp_path):
    header = read_ct2_header(_model_bin(tmp_path / "model.bin", [("w", (2, 3))], [("v", "w")]))
    assert header.resolve("v").shape == (2, 3)


def test_a_rank_beyond_the_limit_is_refused(tmp_path):
    path = _model_bin(tmp_path / "model.bin", [("w", (1,) * (MAX_RANK + 1))])
    with pytest.raises(Ct2FormatError, match=f"rank {MAX_RANK + 1}"):
        read_ct2_header(path)


def test_a_variable_stored_twice_is_refused(tmp_path):
    path = _model_bin(tmp_path / "model.bin", [("w", (2,)), ("w", (2,))])
    with pytest.raises(Ct2FormatError, match="'w' is stored twice"):
        read_ct2_header(path)


def test_alias_loops_long_chains_and_dangling_aliases_are_refused(tmp_path):
    loop = _model_bin(tmp_path / "loop.bin", [("w", (1,))], [("a", "b"), ("b", "a")])
    with pytest.raises(Ct2FormatError, match="does not reach a variable"):
        read_ct2_header(loop)
    n = MAX_ALIAS_HOPS + 1
    chain = [(f"a{i}", f"a{i + 1}") for i in range(n)] + [(f"a{n}", "w")]
    with pytest.raises(Ct2FormatError, match="does not reach a variable"):
        read_ct2_header(_model_bin(tmp_path / "chain.bin", [("w", (1,))], chain))
    with pytest.raises(Ct2FormatError, match="has no variable 'nowhere'"):
        read_ct2_header(_model_bin(tmp_path / "dangling.bin", [("w", (1,))], [("a", "nowhere")]))


def test_declared_alias_count_beyond_the_file_is_refused(tmp_path):
    path = _model_bin(tmp_path / "model.bin", [("w", (1,))])
    data = bytearray(path.read_bytes())
    data[-4:] = struct.pack("<I", 0xFFFFFFFF)
    path.write_bytes(bytes(data))
    with pytest.raises(Ct2FormatError, match="declares 4294967295 aliases but has 0 bytes left"):
        read_ct2_header(path)
