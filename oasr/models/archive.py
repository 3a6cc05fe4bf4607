"""Reading a checkpoint archive (a tar) without trusting it.

A crafted tar can name members outside the folder it is unpacked into (``/etc/x``,
``../../x``), carry links and device nodes, declare members far larger than any checkpoint
needs, or hide a huge record in a header (pax and GNU long-name records are read into memory by
``tarfile``; compressed, gigabytes of them take a few megabytes). This module reads one with all
of that bounded:

- at most ``MAX_MEMBERS`` members, each header record at most ``MAX_HEADER_BYTES``;
- only regular files and directories; a link, device, FIFO or sparse member refuses the archive,
  as does a member name that is absolute or climbs with ``..``;
- only the members the caller asks for are written, each under its own byte cap and all under a
  total cap, streamed to disk in blocks (never read whole into memory), each into a fresh file
  in the caller's folder under its base name; two wanted members with one base name are refused.
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from oasr.models.contained import is_contained_name
from oasr.models.converter import CorruptCheckpointFileError

__all__ = ["ArchiveError", "ArchiveLimits", "extract_members", "member_names", "read_member",
           "MAX_MEMBERS", "MAX_HEADER_BYTES"]

MAX_MEMBERS = 4096
MAX_HEADER_BYTES = 1 << 20
_BLOCK = 1 << 20
_META_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
               tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


class ArchiveError(CorruptCheckpointFileError):
    """A checkpoint archive is unreadable, holds something we refuse, or exceeds a cap."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What may come out of one archive.

    cap_of: base name -> the most bytes that member may hold, or ``None`` for a member that is
        not wanted (it is skipped, never written).
    total: the most bytes all wanted members may hold together.
    how_to_raise: the sentence an over-cap refusal ends with (the flag or variable to set).
    """

    cap_of: Callable[[str], int | None]
    total: int
    how_to_raise: str


class _HeaderTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses an oversized pax / long-name record before tarfile reads it."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _META_TYPES and self.size > MAX_HEADER_BYTES:
            raise _HeaderTooLarge(self.size)
        return super()._proc_member(tar)  # type: ignore[misc]


@contextmanager
def _members(path: Path) -> Iterator[Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]]:
    """The archive's members, checked one by one as they are read; errors name ``path``."""
    try:
        with tarfile.open(path, "r:*", tarinfo=_BoundedTarInfo) as tar:
            yield _checked(path, tar)
    except ArchiveError:
        raise
    except _HeaderTooLarge as exc:
        raise ArchiveError(f"{path} has a tar header record of {exc.size} bytes (the most "
                           f"accepted is {MAX_HEADER_BYTES}); it is not a checkpoint archive "
                           "this reader accepts") from None
    except (tarfile.TarError, OSError, EOFError, ValueError, RuntimeError) as exc:
        # lzma / bz2 / zlib errors arrive as these; a truncated member as tarfile.ReadError.
        raise ArchiveError(f"{path} is not a readable tar archive ({exc}); download or "
                           "re-create the file") from None


def _checked(path: Path, tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarFile,
                                                               tarfile.TarInfo]]:
    count = 0
    while True:
        member = tar.next()
        if member is None:
            return
        count += 1
        if count > MAX_MEMBERS:
            raise ArchiveError(f"{path} holds more than {MAX_MEMBERS} members; a checkpoint "
                               "archive holds a few, so it is refused")
        tar.members.clear()  # tarfile keeps every header read; only the current one is needed
        name = member.name
        if member.isdir() and PurePosixPath(name).parts == ():
            continue  # "./", the archive's root
        if not is_contained_name(name):
            raise ArchiveError(f"{path}: member {name!r} is not a plain relative name (absolute, "
                               "or climbing out with '..'); refusing the archive")
        if member.isdir():
            continue
        if not member.isreg() or member.issparse():
            kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                    else "a sparse file" if member.issparse() else "a device or FIFO")
            raise ArchiveError(f"{path}: member {name!r} is {kind}; a checkpoint archive holds "
                               "regular files only, so it is refused")
        yield tar, member


def member_names(path: str | Path) -> set[str]:
    """The base names of the archive's regular files (the whole archive checked on the way)."""
    path = Path(path)
    with _members(path) as members:
        return {PurePosixPath(m.name).name for _, m in members}


def read_member(path: str | Path, name: str, cap: int) -> bytes | None:
    """The bytes of the first regular member whose base name is ``name`` (``None``: absent),
    refused over ``cap`` bytes. Meant for small members (configs)."""
    path = Path(path)
    with _members(path) as members:
        for tar, member in members:
            if PurePosixPath(member.name).name != name:
                continue
            if member.size > cap:
                raise ArchiveError(f"{path}: member {member.name!r} holds {member.size} bytes, "
                                   f"over the {cap} a {name} may take; refusing it")
            src = tar.extractfile(member)
            data = src.read() if src is not None else b""
            if len(data) != member.size:
                raise ArchiveError(f"{path}: member {member.name!r} is truncated")
            return data
    return None


def extract_members(path: str | Path, dest: Path, limits: ArchiveLimits) -> dict[str, Path]:
    """Stream the wanted members of ``path`` into ``dest`` (an empty folder the caller owns);
    returns base name -> written file.

    Raises:
        ArchiveError: anything ``_checked`` refuses, a wanted member or the total over its cap
            (naming the member and ``limits.how_to_raise``), two wanted members with one base
            name, too little free space in ``dest``, or a truncated member.
    """
    path = Path(path)
    written: dict[str, Path] = {}
    total = 0
    with _members(path) as members:
        for tar, member in members:
            base = PurePosixPath(member.name).name
            cap = limits.cap_of(base)
            if cap is None:
                continue
            if base in written:
                raise ArchiveError(f"{path} holds two members named {base}; refusing to guess "
                                   "which one is the checkpoint's")
            if member.size > cap:
                raise ArchiveError(f"{path}: member {member.name!r} holds {member.size} bytes, "
                                   f"over the cap of {cap}; {limits.how_to_raise}")
            total += member.size
            if total > limits.total:
                raise ArchiveError(f"{path}: its members add up to more than {limits.total} "
                                   f"bytes (at {member.name!r}); {limits.how_to_raise}")
            free = shutil.disk_usage(dest).free
            if member.size > free:
                raise ArchiveError(f"{path}: member {member.name!r} needs {member.size} bytes "
                                   f"but {dest} has {free} free; point TMPDIR at a larger disk")
            target = dest / base
            src = tar.extractfile(member)
            with open(target, "xb") as out:  # "x": a fresh file, never one already there
                copied = _copy(src, out, member.size) if src is not None else 0
            if copied != member.size:
                raise ArchiveError(f"{path}: member {member.name!r} is truncated")
            written[base] = target
    return written


def _copy(src: object, out: object, size: int) -> int:
    copied = 0
    while copied < size:
        block = src.read(min(_BLOCK, size - copied))  # type: ignore[attr-defined]
        if not block:
            break
        out.write(block)  # type: ignore[attr-defined]
        copied += len(block)
    return copied
