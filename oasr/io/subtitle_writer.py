"""``--format srt|vtt|json|tsv`` (and ``txt`` into a folder): one file per recording, written as
rows finish, resumable.

json, tsv and txt are Whisper's per-recording layouts (``oasr.io.transcript_documents``); srt
and vtt are cues built from the word timings. Everything below holds for all five, except that
``txt`` is always a folder (one ``.txt`` file holds many recordings as ``id<TAB>text`` lines,
``oasr.io.writer``).

Where the files go (:func:`subtitle_output_path`): an ``-o`` path ending in the format's own
extension (``talk.srt`` for srt) is that one file, for exactly one recording; any other path is a
folder (created if missing) holding ``<id>.srt`` / ``<id>.vtt`` per recording. Each file is
written whole (tmp file, fsync, rename), so it is complete or absent even after SIGKILL.

The folder's index ``.oasr-subtitles.jsonl`` (append-only, one JSON object a line) records each
finished row as ``{"id", "file", "error", "timings"}`` and each run's metadata, its
``cue_options`` included, as ``{"metadata": {...}}``. A row counts as done when its newest
entry names a file that exists, or records an error (unless ``retry_errors``). An error row
writes no subtitle file (an earlier file of that id is left as it was). A line a crash cut
short is ignored, and cut off before the next append.

File names: the id with every character other than letters, digits, ``.``, ``_`` and ``-``
made ``_`` (and a leading or trailing ``.``); an id that changed on the way, is too long or is a
reserved device name gets ``-<10 hex of sha256(id)>`` appended, so two ids never share a name.
A name that differs only in case from one another id already holds in the folder gets the same
suffix (case-insensitive file systems).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from oasr.io.os_reason import reason
from oasr.io.output_format import (
    EXTENSIONS,
    FORMATS,
    RECORDING_FORMATS,
    SUBTITLE_FORMATS,
    TEXT_FILES,
    OutputError,
    OutputRow,
    check_emit,
    fsync_replace,
)
from oasr.io.output_target import check_output_target
from oasr.io.stale_temp import remove_stale_temps
from oasr.io.subtitles import Cue, CueOptions, build_cues, render, words_from_text
from oasr.io.transcript_documents import DOCUMENT_RENDERERS, render_json

__all__ = [
    "INDEX_NAME",
    "SUBTITLE_EXTENSIONS",
    "SubtitleWriter",
    "check_output_rows",
    "cues_for_row",
    "is_single_file",
    "subtitle_file_name",
    "subtitle_output_path",
]

INDEX_NAME = ".oasr-subtitles.jsonl"
SUBTITLE_EXTENSIONS = {fmt: EXTENSIONS[fmt] for fmt in RECORDING_FORMATS}
_FORMAT_OF = {ext: fmt for fmt, ext in EXTENSIONS.items() if fmt in FORMATS}
_MAX_STEM_BYTES = 160  # file names stop at 255 bytes; leave room for the suffix and extension
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)),
             *(f"LPT{i}" for i in range(10))}


def _ext(fmt: str) -> str:
    if fmt not in SUBTITLE_EXTENSIONS:
        raise OutputError(f"unknown per-recording format {fmt!r}; choose one of "
                          f"{', '.join(SUBTITLE_EXTENSIONS)}")
    return SUBTITLE_EXTENSIONS[fmt]


def is_single_file(path: str | Path, fmt: str) -> bool:
    """Whether ``path`` names one subtitle file (it ends with ``fmt``'s extension and is not an
    existing folder) rather than a folder of them."""
    path = Path(path)
    if fmt == TEXT_FILES:  # a single .txt is the id<TAB>text table (oasr.io.writer)
        return False
    return path.suffix.lower() == _ext(fmt) and not path.is_dir()


def subtitle_output_path(out: str, fmt: str) -> Path:
    """The file (``out`` ends with the format's extension) or folder (anything else) that
    ``oasr transcribe -o out --format fmt`` writes; refuses the other subtitle extension."""
    ext = _ext(fmt)
    path = Path(out)
    is_dir = out.endswith(("/", os.sep)) or path.is_dir()
    suffix = path.suffix.lower()
    if not is_dir and suffix in EXTENSIONS.values() and suffix != ext:
        raise OutputError(
            f"-o {out} ends with {suffix} but --format is {fmt}: name one recording's file "
            f"*{ext}, a folder for many (e.g. -o {path.with_suffix('')}/), or pass "
            f"--format {_FORMAT_OF[suffix]}"
        )
    if not is_single_file(path, fmt) and path.exists() and not path.is_dir():
        raise OutputError(
            f"-o {out} exists and is not a folder; --format {fmt} writes one {ext} per recording "
            f"into a folder, or one recording into a path ending in {ext}"
        )
    return path


def check_output_rows(path: str | Path, fmt: str, rows: int | None) -> None:
    """Refuse, before any decoding, more than one row into a single subtitle file."""
    if fmt in SUBTITLE_EXTENSIONS and rows is not None and rows > 1 and is_single_file(path, fmt):
        raise OutputError(_too_many(Path(path), fmt, f"the inputs hold {rows} recordings"))


def _too_many(path: Path, fmt: str, what: str) -> str:
    ext = _ext(fmt)
    return (
        f"{path} is one {ext} file, for one recording, but {what}; pass a folder instead "
        f"(e.g. -o {path.with_suffix('')}/) to write one {ext} per recording"
    )


def subtitle_file_name(row_id: str, fmt: str, hashed: bool = False) -> str:
    """The file name of ``row_id``'s subtitles (see the module docstring); ``hashed`` forces
    the ``-<hash>`` suffix."""
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in row_id)
    if stem.startswith("."):
        stem = "_" + stem[1:]
    if stem.endswith("."):
        stem = stem[:-1] + "_"
    stem = stem or "_"
    too_long = len(stem.encode("utf-8", "surrogatepass")) > _MAX_STEM_BYTES
    reserved = stem.split(".")[0].upper() in _RESERVED
    if hashed or stem != row_id or too_long or reserved:
        while len(stem.encode("utf-8", "surrogatepass")) > _MAX_STEM_BYTES:
            stem = stem[:-1]
        digest = hashlib.sha256(row_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        stem = f"{stem}-{digest}"
    return stem + _ext(fmt)


def cues_for_row(row: OutputRow, options: CueOptions) -> tuple[list[Cue], str]:
    """``(cues, timings)``: from the row's words (``"words"``); a row without word timings
    falls back to its segments (``"segments"``) or its whole text over ``[0, duration]``
    (``"text"``), each span's words spread over it by length (``"none"`` when it has no
    text)."""
    if row.words is not None:
        return build_cues(row.words, options), "words"
    if row.segments:
        words: list[dict[str, Any]] = []
        previous_end = 0.0
        for seg in row.segments:
            start = previous_end if seg.get("start") is None else float(seg["start"])
            end = start if seg.get("end") is None else float(seg["end"])
            words += words_from_text(seg.get("text") or "", start, end)
            previous_end = end
        return build_cues(words, options), "segments"
    if row.text and row.text.strip() and row.duration:
        return build_cues(words_from_text(row.text, 0.0, row.duration), options), "text"
    return [], "none"


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        fsync_replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class SubtitleWriter:
    """Writes :class:`OutputRow` s as SRT or WebVTT files; the surface of
    :class:`~oasr.io.writer.OutputWriter` (``done_ids``, ``previous_metadata``, ``write``,
    ``flush``, ``close``, ``abort``, context manager). ``path``: a folder, or one ``.srt`` /
    ``.vtt`` file (see :func:`subtitle_output_path`); ``rows``: how many rows the run will
    write, when known, to refuse several into one file up front."""

    def __init__(
        self,
        path: str | Path,
        fmt: str = "srt",
        metadata: dict[str, str] | None = None,
        retry_errors: bool = False,
        cue_options: CueOptions | None = None,
        rows: int | None = None,
        emit: tuple[str, ...] | list[str] = (),
    ) -> None:
        check_emit(fmt, emit)  # json carries the columns --emit adds; the others are text
        self.emit = tuple(emit)
        self.path = Path(path)
        self.fmt = fmt
        self.ext = _ext(fmt)
        self.single = is_single_file(self.path, fmt)
        self.folder = self.path.parent if self.single else self.path
        if not self.single and self.path.exists() and not self.path.is_dir():
            raise OutputError(f"{self.path} exists and is not a folder for {self.ext} files")
        check_output_rows(self.path, fmt, rows)
        check_output_target(self.path, fmt)
        self.index_path = self.folder / INDEX_NAME
        remove_stale_temps(self.folder, ".")
        self.metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
        if self.emit:
            self.metadata["emit"] = ",".join(self.emit)
        self.retry_errors = retry_errors
        self.cue_options = cue_options or CueOptions()
        self._entries: dict[str, dict[str, Any]] | None = None  # casefolded file -> newest entry
        self._previous: dict[str, str] | None = None
        self._fd: int | None = None
        self._single_id: str | None = None
        self._closed = False
        self._failed: OutputError | None = None  # the write that failed, reported once
        # srt/vtt files written without a cue (a recording without speech), for a note: the
        # file is still valid (an empty SRT, a bare WEBVTT header).
        self.empty_files: list[Path] = []

    # -------------------------------------------------------------- the index

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is not None:
            return self._entries
        entries: dict[str, dict[str, Any]] = {}
        if self.index_path.is_file():
            with open(self.index_path, "rb") as f:
                raw = f.read()
            lines = raw.split(b"\n")
            # The last piece is empty after a final newline, or a line torn by a crash.
            for number, line in enumerate(lines[:-1], start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    if "metadata" in obj:
                        self._previous = {str(k): str(v) for k, v in obj["metadata"].items()}
                        continue
                    if not isinstance(obj["id"], str) or not isinstance(obj["file"], str):
                        raise TypeError("id and file must be strings")
                except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError,
                        AttributeError) as exc:
                    raise OutputError(
                        f"{self.index_path} line {number} is not an oasr subtitle index entry "
                        f"({exc}); remove the index to start the folder over"
                    ) from exc
                entries[obj["file"].casefold()] = obj
        self._entries = entries
        return entries

    def _open_index(self) -> int:
        if self._fd is not None:
            return self._fd
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size:
            # Drop a line a crash tore, so the next entry starts on a line of its own.
            data = os.pread(fd, min(size, 1 << 20), max(size - (1 << 20), 0))
            if not data.endswith(b"\n"):
                os.ftruncate(fd, size - len(data) + data.rfind(b"\n") + 1)
        self._fd = fd
        cues = json.dumps(dataclasses.asdict(self.cue_options), sort_keys=True)
        self._append({"metadata": {**self.metadata, "cue_options": cues}})
        return fd

    def _append(self, obj: dict[str, Any]) -> None:
        assert self._fd is not None
        data = memoryview((json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8"))
        while data:  # one write() per line keeps appends from shard processes whole
            data = data[os.write(self._fd, data) :]

    def _candidates(self, row_id: str) -> list[str]:
        if self.single:
            return [self.path.name]
        names = [subtitle_file_name(row_id, self.fmt), subtitle_file_name(row_id, self.fmt, True)]
        return list(dict.fromkeys(names))

    def _entry_done(self, entry: dict[str, Any]) -> bool:
        if entry.get("error") is not None:
            return not self.retry_errors
        return (self.folder / entry["file"]).is_file()

    def _name_for(self, row_id: str) -> str:
        entries = self._load()
        for name in self._candidates(row_id):
            owner = entries.get(name.casefold())
            if self.single or owner is None or owner["id"] == row_id:
                return name
        return self._candidates(row_id)[-1]

    def done_ids(self) -> set[str]:
        """Ids whose newest entry names a subtitle file that exists (this file, in single-file
        mode), or an error when not ``retry_errors``."""
        done = set()
        for key, entry in self._load().items():
            row_id = entry["id"]
            names = {n.casefold() for n in self._candidates(row_id)}
            if key in names and self._entry_done(entry):
                done.add(row_id)
        return done

    def previous_metadata(self) -> dict[str, str] | None:
        """The metadata the newest earlier run recorded in the index, or None."""
        self._load()
        return self._previous

    # -------------------------------------------------------------- writing

    def write(self, row: OutputRow) -> None:
        """Write ``row``'s subtitle file (not for an error row) and record it in the index."""
        if self._closed:
            raise OutputError(f"writer for {self.path} is closed")
        if self.single:
            if self._single_id not in (None, row.id):
                raise OutputError(
                    _too_many(self.path, self.fmt, f"a second recording ({row.id!r}, after "
                                                    f"{self._single_id!r}) arrived")
                )
            self._single_id = row.id
        if self._failed is not None:
            raise self._failed
        name = self._name_for(row.id)
        entry: dict[str, Any] = {"id": row.id, "file": name, "error": row.error}
        target = self.index_path
        try:
            self._open_index()
            if row.error is None:
                if self.fmt == "json" and self.emit:
                    text, timings = render_json(row, self.emit)
                elif self.fmt in DOCUMENT_RENDERERS:
                    text, timings = DOCUMENT_RENDERERS[self.fmt](row)
                else:
                    cues, timings = cues_for_row(row, self.cue_options)
                    text = render(cues, self.fmt)
                target = self.folder / name
                _write_whole(target, text)
                entry["timings"] = timings
                if timings == "none" and self.fmt in SUBTITLE_FORMATS:
                    self.empty_files.append(target)
            target = self.index_path
            self._append(entry)
        except OSError as err:
            self._failed = OutputError(
                f"cannot write {target}: {reason(err, target)}; kept: every {self.ext} file "
                f"finished before, recorded in {self.index_path}; fix the cause (free space) "
                "and rerun the same command to resume")
            raise self._failed from None
        self._load()[name.casefold()] = entry

    def flush(self) -> None:
        """Make the index durable (subtitle files are durable once written)."""
        if self._fd is not None and self._failed is None:
            os.fsync(self._fd)

    def _finish(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fd is not None:
            try:
                if self._failed is None:
                    os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    def close(self) -> None:
        """Flush the index and stop; the folder exists afterwards even if no row came."""
        if not self._closed and not self.single:
            self.folder.mkdir(parents=True, exist_ok=True)
        self._finish()

    def abort(self) -> None:
        """Stop after an error; every finished file and index entry is already on disk."""
        self._finish()

    def __enter__(self) -> SubtitleWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
