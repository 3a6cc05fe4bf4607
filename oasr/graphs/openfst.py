"""OpenFST binary files: a standard-arc FST read into ``DecodingGraph`` arrays, and written.

Our graphs are saved as OpenFST ``const`` FSTs (``fstconvert --fst_type=const``), the format
Kaldi's decoders and kaldi-decoder memory-map. Its body is two flat arrays (states: final weight,
first arc, arc counts; arcs: ilabel, olabel, weight, nextstate), so it is read with numpy, no
per-state loop. A ``vector`` FST (what Kaldi's tools write by default) is converted to that form
through ``kaldifst`` (the graph-building extra); other types are refused by name.

Layout (fst.h ``FstHeader``): int32 magic 2125659606, the FST type and arc type (int32 length +
bytes), int32 version, int32 flags (1: input symbols follow, 2: output symbols follow, 4: arrays
aligned to 16 bytes), uint64 properties, int64 start, int64 states, int64 arcs.
"""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FstFormatError", "FstHeader", "read_header", "read_fst_arrays", "write_const_fst",
           "FstArrays"]

FST_MAGIC = 2125659606
SYMBOLS_MAGIC = 2125658996
_HAS_ISYMBOLS, _HAS_OSYMBOLS, _IS_ALIGNED = 1, 2, 4
_ALIGN = 16
_STATE = np.dtype([("final", "<f4"), ("pos", "<u4"), ("narcs", "<u4"), ("niepsilons", "<u4"),
                   ("noepsilons", "<u4")])
_ARC = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("next", "<i4")])


class FstFormatError(ValueError):
    """A file that is not an FST we can read; the message names it and the fix."""


@dataclass(frozen=True)
class FstHeader:
    fst_type: str
    arc_type: str
    version: int
    flags: int
    properties: int
    start: int
    num_states: int
    num_arcs: int
    body: int  # byte offset of the body (after any symbol tables)


@dataclass
class FstArrays:
    """An FST's arcs in file order, grouped by source state."""

    start: int
    final: np.ndarray  # (S,) float32 cost, +inf where not final
    src: np.ndarray  # (A,) int32
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray  # float32
    next: np.ndarray


class _Reader:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise FstFormatError(f"{self.path}: the file ends inside its header (truncated?)")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("<i")
        if n < 0 or self.pos + n > len(self.data):
            raise FstFormatError(f"{self.path}: a header string runs past the end")
        s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def skip_symbols(self) -> None:
        if self.take("<i") != SYMBOLS_MAGIC:
            raise FstFormatError(f"{self.path}: a symbol table in the header is damaged")
        self.string()  # its name
        self.take("<q")  # available key
        for _ in range(self.take("<q")):
            self.string()
            self.take("<q")


def _parse_header(data: memoryview, path: Path) -> FstHeader:
    r = _Reader(data, path)
    if len(data) < 4 or r.take("<i") != FST_MAGIC:
        raise FstFormatError(f"{path} is not an OpenFST binary file (no FST magic number); "
                             "a text FST must be compiled first (fstcompile)")
    fst_type, arc_type = r.string(), r.string()
    version, flags = r.take("<i"), r.take("<i")
    properties, start, num_states, num_arcs = r.take("<Q"), r.take("<q"), r.take("<q"), r.take("<q")
    if flags & _HAS_ISYMBOLS:
        r.skip_symbols()
    if flags & _HAS_OSYMBOLS:
        r.skip_symbols()
    return FstHeader(fst_type, arc_type, version, flags, properties, start, num_states, num_arcs,
                     r.pos)


def read_header(path: str | Path) -> FstHeader:
    path = Path(path)
    return _parse_header(memoryview(path.read_bytes()), path)


def _aligned(pos: int, aligned: bool) -> int:
    return -(-pos // _ALIGN) * _ALIGN if aligned else pos


def _read_const(data: memoryview, hdr: FstHeader, path: Path) -> FstArrays:
    aligned = bool(hdr.flags & _IS_ALIGNED)
    pos = _aligned(hdr.body, aligned)
    end = pos + hdr.num_states * _STATE.itemsize
    arcs_at = _aligned(end, aligned)
    if arcs_at + hdr.num_arcs * _ARC.itemsize > len(data):
        raise FstFormatError(f"{path}: the file is shorter than its {hdr.num_states} states and "
                             f"{hdr.num_arcs} arcs (truncated?)")
    states = np.frombuffer(data, _STATE, hdr.num_states, pos)
    arcs = np.frombuffer(data, _ARC, hdr.num_arcs, arcs_at)
    counts = states["narcs"].astype(np.int64)
    if counts.sum() != hdr.num_arcs or (hdr.num_states and not np.array_equal(
            states["pos"].astype(np.int64), np.concatenate([[0], np.cumsum(counts)[:-1]]))):
        raise FstFormatError(f"{path}: its states do not list its arcs in order (damaged?)")
    src = np.repeat(np.arange(hdr.num_states, dtype=np.int32), counts)
    final = states["final"].astype(np.float32)
    return FstArrays(int(hdr.start), final, src, arcs["ilabel"].copy(), arcs["olabel"].copy(),
                     arcs["weight"].copy(), arcs["next"].copy())


def read_fst_arrays(path: str | Path) -> FstArrays:
    """A standard-arc (tropical, float) FST file as flat arrays."""
    path = Path(path)
    data = memoryview(path.read_bytes())
    hdr = _parse_header(data, path)
    if hdr.arc_type != "standard":
        raise FstFormatError(f"{path}: arc type {hdr.arc_type!r}; the decoder reads tropical "
                             "'standard' arcs (fstmap --map_type=to_standard converts a log FST)")
    if hdr.fst_type == "const":
        return _read_const(data, hdr, path)
    if hdr.fst_type == "vector":
        return _via_const(path)
    raise FstFormatError(f"{path}: FST type {hdr.fst_type!r} is not read here; convert it with "
                         "'fstconvert --fst_type=const'")


def _via_const(path: Path) -> FstArrays:
    try:
        import kaldifst
    except ImportError as exc:
        raise FstFormatError(f"{path} is a vector FST: reading it needs kaldifst (pip install "
                             "kaldifst), or convert it with 'fstconvert --fst_type=const'") from exc
    fst = kaldifst.StdVectorFst.read(str(path))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "const.fst"
        kaldifst.StdConstFst(fst).write(str(out))
        data = memoryview(out.read_bytes())
        return _read_const(data, _parse_header(data, out), path)


def write_const_fst(fst: Any, path: str | Path) -> None:
    """Write a kaldifst FST as an OpenFST const FST."""
    import kaldifst

    kaldifst.StdConstFst(fst).write(str(path))
