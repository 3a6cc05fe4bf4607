"""Read a CTranslate2 ``model.bin`` without CTranslate2.

Binary layout (version 6, little-endian)::

    u32 binary_version
    str spec_name                        (str = u16 length incl. NUL, utf-8 bytes, NUL)
    u32 spec_revision
    u32 n_variables
    n_variables x [str name, u8 rank, rank x u32 dim, u8 dtype, u32 nbytes, nbytes data]
    u32 n_aliases
    n_aliases x [str alias, str target]

dtype codes follow CTranslate2's ``DataType`` order: float32, int8, int16, int32, float16,
bfloat16. A quantized weight ``w`` comes with ``w_scale``: int8 rows were multiplied by
``127 / amax(row)`` and rounded, int16 by one scalar; ``load_ct2`` undoes that by default.
Aliases name variables CTranslate2 stored once because their values were identical (a tied
projection, two equal layer norms).
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch

from oasr.models.converter import CorruptCheckpointFileError

SUPPORTED_BINARY_VERSION = 6
# A crafted header is bounded by these and by the file's size, never by what it declares.
MAX_RANK = 8
MAX_ALIAS_HOPS = 16
_MIN_VARIABLE_BYTES = 3 + 1 + 1 + 4  # a name (u16 length, a char, NUL), rank, dtype, nbytes
_MIN_ALIAS_BYTES = 2 * (2 + 1)
DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.int8, torch.int16, torch.int32, torch.float16, torch.bfloat16,
)
_SCALE_SUFFIX = "_scale"


class Ct2FormatError(CorruptCheckpointFileError):
    """The file is not a CTranslate2 model.bin this reader understands (or is truncated)."""


@dataclass(frozen=True)
class Ct2Variable:
    """One stored variable: where its bytes are and how to view them."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    nbytes: int


@dataclass
class Ct2Header:
    """Everything in a model.bin but the tensor data."""

    path: Path
    binary_version: int
    spec_name: str
    revision: int
    variables: dict[str, Ct2Variable]
    aliases: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> Ct2Variable:
        """The stored variable ``name`` is or aliases.

        Raises:
            Ct2FormatError: no such variable, or an alias chain that loops or runs longer than
                ``MAX_ALIAS_HOPS`` (CTranslate2 writes aliases of stored variables).
        """
        first = name
        for _ in range(MAX_ALIAS_HOPS):
            if name not in self.aliases:
                break
            name = self.aliases[name]
        else:
            raise Ct2FormatError(f"{self.path}: the alias {first!r} does not reach a variable in "
                                 f"{MAX_ALIAS_HOPS} steps (a loop or a crafted chain)")
        if name not in self.variables:
            raise Ct2FormatError(f"{self.path} has no variable {name!r}; it is not a complete "
                                 "CTranslate2 model of this kind")
        return self.variables[name]

    def names(self) -> list[str]:
        """Every name, stored or aliased."""
        return sorted(set(self.variables) | set(self.aliases))


@dataclass
class Ct2Model:
    """A loaded model.bin: tensors by name (aliases resolved to the same tensor)."""

    spec_name: str
    revision: int
    tensors: dict[str, torch.Tensor]
    aliases: dict[str, str]


class _Reader:
    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f = f
        self.path = path
        self.size = size

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise Ct2FormatError(f"{self.path} is truncated at byte {self.f.tell()}")
        return data

    def u8(self) -> int:
        return self.read(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.read(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.read(4))[0]

    def string(self) -> str:
        n = self.u16()
        raw = self.read(n)
        if n == 0 or raw[-1] != 0:
            raise Ct2FormatError(f"{self.path}: malformed string at byte {self.f.tell() - n}")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as e:
            raise Ct2FormatError(f"{self.path}: a name is not utf-8 ({e})") from None


def read_spec_name(path: str | Path) -> str | None:
    """The spec name in a model.bin's first bytes, or ``None`` if it is not one (cheap)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(6)
            if len(head) < 6:
                return None
            version, n = struct.unpack("<IH", head)
            if version != SUPPORTED_BINARY_VERSION or not 1 <= n <= 256:
                return None
            raw = f.read(n)
    except OSError:
        return None
    if len(raw) != n or raw[-1] != 0:
        return None
    try:
        return raw[:-1].decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_ct2_header(path: str | Path) -> Ct2Header:
    """Index a model.bin: names, shapes, dtypes and byte offsets; no tensor data is read.

    Raises:
        Ct2FormatError: wrong binary version, unknown dtype, inconsistent sizes, truncation or
            trailing bytes.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        r = _Reader(f, path, size)
        version = r.u32()
        if version != SUPPORTED_BINARY_VERSION:
            raise Ct2FormatError(
                f"{path}: CTranslate2 binary version {version} is not supported (this reader "
                f"reads version {SUPPORTED_BINARY_VERSION}); re-convert with a current "
                "ct2-transformers-converter"
            )
        spec_name = r.string()
        revision = r.u32()
        count = r.u32()
        _check_count(r, count, _MIN_VARIABLE_BYTES, "variables")
        variables: dict[str, Ct2Variable] = {}
        for _ in range(count):
            name = r.string()
            if name in variables:
                raise Ct2FormatError(f"{path}: variable {name!r} is stored twice")
            rank = r.u8()
            if rank > MAX_RANK:
                raise Ct2FormatError(f"{path}: variable {name!r} has rank {rank} (at most "
                                     f"{MAX_RANK} is read)")
            shape = tuple(r.u32() for _ in range(rank))
            code = r.u8()
            if code >= len(DTYPES):
                raise Ct2FormatError(f"{path}: variable {name!r} has unknown dtype code {code}")
            dtype = DTYPES[code]
            nbytes = r.u32()
            itemsize = torch.empty((), dtype=dtype).element_size()
            if nbytes != math.prod(shape) * itemsize:
                raise Ct2FormatError(
                    f"{path}: variable {name!r} of shape {shape} and dtype {dtype} should "
                    f"take {math.prod(shape) * itemsize} bytes, the file says {nbytes}"
                )
            offset = f.tell()
            if offset + nbytes > size:
                raise Ct2FormatError(f"{path} is truncated inside variable {name!r} (download "
                                     "or convert it again)")
            f.seek(nbytes, 1)
            variables[name] = Ct2Variable(name, shape, dtype, offset, nbytes)
        aliases = {}
        n_aliases = r.u32()
        _check_count(r, n_aliases, _MIN_ALIAS_BYTES, "aliases")
        for _ in range(n_aliases):
            alias = r.string()
            aliases[alias] = r.string()
        if f.tell() != size:
            raise Ct2FormatError(f"{path}: {size - f.tell()} unexpected bytes after the aliases")
    header = Ct2Header(path, version, spec_name, revision, variables, aliases)
    for alias in aliases:
        header.resolve(alias)  # a dangling alias is a broken file, not a missing weight
    return header


def _check_count(r: _Reader, count: int, min_bytes: int, what: str) -> None:
    """Refuse a declared count that the rest of the file cannot hold (before looping on it)."""
    left = r.size - r.f.tell()
    if count * min_bytes > left:
        raise Ct2FormatError(f"{r.path} declares {count} {what} but has {left} bytes left; it is "
                             "truncated or not a CTranslate2 model.bin (download or convert it "
                             "again)")


def _read_tensor(f: BinaryIO, var: Ct2Variable) -> torch.Tensor:
    if var.nbytes == 0:
        return torch.empty(var.shape, dtype=var.dtype)
    buf = bytearray(var.nbytes)
    f.seek(var.offset)
    if f.readinto(buf) != var.nbytes:
        raise Ct2FormatError(f"short read of variable {var.name!r}")
    # A fresh bytearray is suitably aligned for any element type.
    return torch.frombuffer(buf, dtype=torch.uint8).view(var.dtype).reshape(var.shape)


def load_ct2(
    path: str | Path,
    header: Ct2Header | None = None,
    dequantize: bool = True,
) -> Ct2Model:
    """Load every variable of a model.bin as CPU tensors.

    Args:
        path: the model.bin.
        header: a header already read from the same file (saves a second scan).
        dequantize: replace each quantized ``w`` / ``w_scale`` pair by the float weight, in
            the file's prevailing float dtype.
    """
    path = Path(path)
    header = header or read_ct2_header(path)
    tensors: dict[str, torch.Tensor] = {}
    with open(path, "rb") as f:
        for name, var in header.variables.items():
            tensors[name] = _read_tensor(f, var)
    if dequantize:
        tensors = dequantize_tensors(tensors)
    for alias in header.aliases:
        target = header.resolve(alias).name
        if target in tensors:
            tensors[alias] = tensors[target]
    return Ct2Model(header.spec_name, header.revision, tensors, dict(header.aliases))


def dequantize_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Undo CTranslate2 weight quantization: ``w = q / scale`` (per row for int8).

    The float dtype is the one most of the file's unquantized float tensors have (an
    ``int8_float16`` model dequantizes to float16).
    """
    scaled = [
        n for n in tensors
        if n.endswith(_SCALE_SUFFIX)
        and n[: -len(_SCALE_SUFFIX)] in tensors
        and not tensors[n[: -len(_SCALE_SUFFIX)]].is_floating_point()
    ]
    if not scaled:
        return dict(tensors)
    skip = set(scaled) | {n[: -len(_SCALE_SUFFIX)] for n in scaled}
    floats = Counter(t.dtype for n, t in tensors.items()
                     if n not in skip and t.is_floating_point() and t.dim() > 0)
    dtype = floats.most_common(1)[0][0] if floats else torch.float32
    out = {n: t for n, t in tensors.items() if n not in skip}
    for scale_name in scaled:
        name = scale_name[: -len(_SCALE_SUFFIX)]
        q, scale = tensors[name], tensors[scale_name].float()
        if scale.dim() == 1 and q.dim() >= 1:
            scale = scale.reshape(-1, *([1] * (q.dim() - 1)))
        out[name] = (q.float() / scale).to(dtype)
    return out
