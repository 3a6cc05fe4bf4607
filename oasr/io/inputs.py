"""The inputs of a run, expanded into files: manifests by type, audio files with their ids.

Folders are walked recursively and globs expanded, both sorted, so a run sees the same files in
the same order every time. Audio files get ids from their stems; where stems collide, the path
relative to the files' common folder without extension (with it where even that collides).
A name that is not UTF-8 is read as the bytes it is (Python's surrogate escapes reach the file
system unchanged); in ids and messages those bytes read ``\\xNN`` (``oasr.audio.printable``).
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from oasr.audio.errors import printable

__all__ = ["AUDIO_EXTENSIONS", "InputFile", "ManifestError", "expand_inputs"]

AUDIO_EXTENSIONS = frozenset(
    {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".mp4", ".webm"}
)
_PARQUET_EXTENSIONS = frozenset({".parquet"})
_ARROW_EXTENSIONS = frozenset({".arrow", ".feather", ".ipc"})
_JSONL_EXTENSIONS = frozenset({".jsonl", ".json", ".ndjson"})


class ManifestError(ValueError):
    """An input cannot be read as a whole; the message names it and says what to change."""


@dataclass(frozen=True)
class InputFile:
    """One input file: a manifest, or one audio file with its precomputed id."""

    kind: str  # "parquet" | "arrow" | "jsonl" | "audio"
    path: Path
    audio_id: str | None = None

    def source(self, pos: int) -> str:
        if self.kind == "audio":
            return printable(str(self.path))
        return f"{printable(str(self.path))} {'line' if self.kind == 'jsonl' else 'row'} {pos}"


def _kind_of(path: Path) -> str | None:
    ext = path.suffix.lower()
    if ext in AUDIO_EXTENSIONS:
        return "audio"
    if ext in _PARQUET_EXTENSIONS:
        return "parquet"
    if ext in _ARROW_EXTENSIONS:
        return "arrow"
    if ext in _JSONL_EXTENSIONS:
        return "jsonl"
    return None


def _walk_audio(root: Path) -> list[Path]:
    """Audio files under ``root``, recursively, sorted; hidden files and folders skipped (they
    are editor and OS droppings such as macOS ``._x.wav``, not recordings)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith(".") and Path(name).suffix.lower() in AUDIO_EXTENSIONS:
                found.append(Path(folder) / name)
    return sorted(found, key=lambda p: p.as_posix())


def _audio_ids(paths: list[Path]) -> list[str]:
    """File stems; where stems collide, the path relative to the common folder without
    extension (with it, where even that collides: ``x.wav`` beside ``x.flac``)."""
    stems = Counter(p.stem for p in paths)
    if all(c == 1 for c in stems.values()):
        return [p.stem for p in paths]
    absolute = [Path(os.path.abspath(p)) for p in paths]
    root = Path(os.path.commonpath([str(p.parent) for p in absolute]))
    rel = [p.relative_to(root) for p in absolute]
    bare = Counter(r.with_suffix("").as_posix() for r in rel)
    ids = []
    for p, r in zip(paths, rel, strict=True):
        if stems[p.stem] == 1:
            ids.append(p.stem)
        elif bare[r.with_suffix("").as_posix()] == 1:
            ids.append(r.with_suffix("").as_posix())
        else:
            ids.append(r.as_posix())
    return ids


def expand_inputs(inputs: list[str]) -> list[InputFile]:
    supported = sorted(
        AUDIO_EXTENSIONS | _PARQUET_EXTENSIONS | _ARROW_EXTENSIONS | _JSONL_EXTENSIONS
    )
    if not inputs:
        raise ManifestError("no inputs given")
    entries: list[tuple[str, Path]] = []
    for raw in inputs:
        path = Path(raw)
        if path.is_dir():
            files = _walk_audio(path)
            if not files:
                raise ManifestError(f"folder {raw} holds no audio files ({', '.join(supported)})")
            entries.extend(("audio", f) for f in files)
        elif path.is_file():
            kind = _kind_of(path)
            if kind is None:
                raise ManifestError(
                    f"{raw}: unsupported input type {path.suffix!r}; supported: "
                    f"{', '.join(supported)}, folders and globs"
                )
            entries.append((kind, path))
        elif any(c in raw for c in "*?["):
            matches = sorted(glob.glob(raw, recursive=True))
            before = len(entries)
            for m in matches:
                mp = Path(m)
                if mp.is_dir():
                    entries.extend(("audio", f) for f in _walk_audio(mp))
                elif (kind := _kind_of(mp)) is not None:
                    entries.append((kind, mp))
            if len(entries) == before:
                raise ManifestError(f"no manifests or audio files match {raw!r}")
        else:
            raise ManifestError(f"input not found: {raw}")
    audio_paths = [p for kind, p in entries if kind == "audio"]
    ids = iter(printable(i) for i in _audio_ids(audio_paths))
    return [InputFile(kind, p, next(ids) if kind == "audio" else None) for kind, p in entries]
