"""Whether an output path may be written, decided before anything is loaded or decoded.

An output is only ever created where nothing is, or written over a file OASR wrote itself:

- a device, FIFO or socket (or a link to one) is refused whatever the flags: a rename over
  ``/dev/null`` would replace the device node, and a FIFO would swallow the rows;
- an existing regular file is ours when it says so: a Parquet output carries the key
  ``oasr_output`` (or, from earlier releases, ``oasr_version``) in its key-value metadata; a
  JSONL or text output has a sidecar ``<out>.oasr.json`` naming its kind (text has no room for
  metadata); a per-recording file (srt, vtt, json, tsv) is named in its folder's index
  (``.oasr-subtitles.jsonl``). Anything else (the input manifest, a Parquet file of someone
  else's, an unrelated ``.txt``) is refused, naming it;
- an output that is one of the run's inputs is refused (a rerun would replace what it reads).

Our own output is resumed into, or with ``--overwrite`` removed first
(:func:`remove_previous_output`, called while holding the output's lock).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from oasr.io.os_reason import reason
from oasr.io.output_format import RECORDING_FORMATS, OutputError

__all__ = [
    "FINALS",
    "KIND_KEY",
    "TRANSCRIPTS",
    "check_output_target",
    "remove_previous_output",
    "sidecar_path",
    "write_sidecar",
]

KIND_KEY = "oasr_output"  # metadata key (Parquet) and sidecar field naming what wrote a file
TRANSCRIPTS = "transcripts"  # oasr transcribe
FINALS = "stream-finals"  # oasr stream --output
_LEGACY_KEY = b"oasr_version"  # what transcribe outputs carried before KIND_KEY
_SUBTITLE_INDEX = ".oasr-subtitles.jsonl"  # oasr.io.subtitle_writer.INDEX_NAME
_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def sidecar_path(path: Path) -> Path:
    """The sidecar that marks a JSONL or text output as ours: ``<out>.oasr.json``."""
    return path.with_name(f"{path.name}.oasr.json")


def write_sidecar(path: Path, kind: str, metadata: dict[str, str]) -> None:
    """Write ``path``'s sidecar (atomically): its kind and the run's metadata. Written before
    the output itself appears, so an output of ours never lacks one."""
    from oasr.io.output_format import fsync_replace

    side = sidecar_path(path)
    tmp = side.with_name(f"{side.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({KIND_KEY: kind, **metadata}, f, ensure_ascii=False, indent=1,
                      sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        fsync_replace(tmp, side)
    finally:
        tmp.unlink(missing_ok=True)


def read_sidecar(path: Path) -> dict[str, str] | None:
    """The sidecar's fields, or None when there is none (or it is not one of ours)."""
    try:
        with open(sidecar_path(path), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get(KIND_KEY), str):
        return None
    return {str(k): str(v) for k, v in data.items()}


def _special(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file or folder (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((what for test, what in _SPECIAL if test(mode)), None)


def _readable_parquet(path: Path) -> bool:
    try:
        pq.read_schema(path)
    except (pa.ArrowException, OSError):
        return False
    return True


def _parquet_kind(path: Path) -> str | None:
    """The kind a Parquet file's metadata declares; None when it is not ours."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError):
        return None
    if KIND_KEY.encode() in meta:
        return meta[KIND_KEY.encode()].decode("utf-8", "replace")
    return TRANSCRIPTS if _LEGACY_KEY in meta else None


def _index_entries(folder: Path) -> dict[str, tuple[str, str]]:
    """File name (casefolded) -> (id, file name) of its newest entry in a subtitle folder's
    index."""
    entries: dict[str, tuple[str, str]] = {}
    try:
        with open(folder / _SUBTITLE_INDEX, "rb") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if (isinstance(obj, dict) and isinstance(obj.get("file"), str)
                        and isinstance(obj.get("id"), str)):
                    entries[obj["file"].casefold()] = (obj["id"], obj["file"])
    except OSError:
        pass
    return entries


def _indexed_files(folder: Path) -> set[str]:
    """The file names a subtitle folder's index records (casefolded)."""
    return set(_index_entries(folder))


def _owner(path: Path, fmt: str) -> str | None:
    """The kind of OASR output the existing file ``path`` is, or None when not ours."""
    if fmt == "parquet":
        return _parquet_kind(path)
    if fmt in RECORDING_FORMATS:
        return TRANSCRIPTS if path.name.casefold() in _indexed_files(path.parent) else None
    side = read_sidecar(path)
    return side[KIND_KEY] if side is not None else None


def _refuse_not_ours(path: Path, fmt: str, why: str) -> OutputError:
    return OutputError(
        f"-o {path} {why}; oasr only writes over its own outputs (--overwrite included): "
        "remove or rename that file, or choose another -o")


def _input_files(inputs: Iterable[str | Path]) -> list[Path]:
    """The files a run reads (manifests and audio; folders and globs expanded)."""
    from oasr.io.inputs import expand_inputs

    listed = [str(i) for i in inputs]
    return [unit.path for unit in expand_inputs(listed)] if listed else []


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output_target(path: Path, fmt: str, *, inputs: Iterable[str | Path] = (),
                        kind: str = TRANSCRIPTS) -> None:
    """Raise :class:`OutputError` naming ``path`` when it must not be written as ``fmt`` by a
    writer of ``kind`` (see the module docstring); ``inputs``: the run's inputs, none of which
    it may be. ``--overwrite`` refuses exactly the same paths."""
    path = Path(path)
    what = _special(path)
    if what is not None:
        raise OutputError(f"-o {path} is {what}, not a file; oasr never writes over one: "
                          "choose a file path for the output")
    if fmt in RECORDING_FORMATS and (path.is_dir() or not path.exists()):
        _check_subtitle_folder(path, fmt)
        return
    if not path.exists():
        return
    if path.is_dir():
        raise OutputError(f"-o {path} is a folder; name the output file in it")
    for source in _input_files(inputs):
        if _same_file(path, source):
            raise OutputError(f"-o {path} is one of the inputs; choose another -o (a run "
                              "writes its output over the file it would be reading)")
    owner = _owner(path, fmt)
    if owner is None:
        if fmt == "parquet":
            why = (f"exists and is not an oasr output (its Parquet metadata has no "
                   f"{KIND_KEY!r} key)" if _readable_parquet(path) else
                   "exists and is not an oasr output (not a readable Parquet file)")
        elif fmt in RECORDING_FORMATS:
            why = f"exists and is not named in {path.parent / _SUBTITLE_INDEX}"
        else:
            why = f"exists and is not an oasr output (it has no sidecar {sidecar_path(path)})"
        raise _refuse_not_ours(path, fmt, why)
    if owner != kind:
        raise _refuse_not_ours(path, fmt, f"is an oasr {owner} output, not {kind}")


def _check_subtitle_folder(folder: Path, fmt: str) -> None:
    """A folder of per-recording files: refuse one holding files of the format that its index
    does not name (someone else's), since a row's file could land on one of them."""
    from oasr.io.output_format import EXTENSIONS

    if not folder.is_dir():
        return
    ours = _indexed_files(folder)
    for entry in os.scandir(folder):
        if (entry.name.lower().endswith(EXTENSIONS[fmt]) and entry.name.casefold() not in ours
                and not entry.name.startswith(".")):
            raise _refuse_not_ours(folder, fmt,
                                   f"holds {entry.name}, which oasr did not write "
                                   f"(not named in {folder / _SUBTITLE_INDEX})")


def remove_previous_output(path: Path, fmt: str) -> list[Path]:
    """``--overwrite``: remove our earlier output at ``path`` (already checked to be ours by
    :func:`check_output_target`) and what belongs to it: leftover parts and the sidecar; for
    per-recording formats the files the folder's index names, then the index. Call it while
    holding the output's lock. Returns what was removed."""
    path = Path(path)
    removed: list[Path] = []
    try:
        if fmt in RECORDING_FORMATS:
            return _remove_recordings(path)
        parts = Path(f"{path}.parts")
        if parts.is_dir():
            shutil.rmtree(parts)
            removed.append(parts)
        for target in (path, sidecar_path(path)):
            if target.is_file():
                target.unlink()
                removed.append(target)
    except OSError as err:
        raise OutputError(f"--overwrite: cannot remove the earlier output at {path} "
                          f"({reason(err)}); remove it yourself") from None
    return removed


def _remove_recordings(path: Path) -> list[Path]:
    """The per-recording files our index names (one file, or a whole folder's), and a
    folder's index; a single file's index entry is superseded by one that names no finished
    row, since the index is shared with the folder's other single files."""
    single = not path.is_dir() and bool(path.suffix)
    folder = path.parent if single else path
    entries = _index_entries(folder)
    names = [path.name] if single else sorted(file for _, file in entries.values())
    removed: list[Path] = []
    for name in names:
        target = folder / name
        if target.is_file():
            target.unlink()
            removed.append(target)
    index = folder / _SUBTITLE_INDEX
    if not single:
        if index.is_file():
            index.unlink()
            removed.append(index)
    elif path.name.casefold() in entries:
        reset = {"id": entries[path.name.casefold()][0], "file": path.name, "error": None}
        with open(index, "a", encoding="utf-8") as f:
            f.write(json.dumps(reset, ensure_ascii=False) + "\n")
    return removed
