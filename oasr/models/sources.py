"""Resolve a model source string to a local folder.

A source is, in the order tried:

1. a local folder (a checkpoint or a native bundle), or a checkpoint file (a ``.nemo``):
   itself (a file no registered format claims is refused at detection);
2. an installed Python package that ships a model: the folder inside it holding the model
   files (``model.bin``, ``config.json``, ``oasr_config.json``, ...);
3. a model split across packages ``<prefix>_part1``, ``<prefix>_part2``, ... each holding
   ``<file>.part<N>``: the parts joined, with the other files, into a cache folder
   (``$OASR_CACHE_DIR/sources/<prefix>``), reused while the parts are unchanged;
4. a Hugging Face Hub id ``org/name``: its snapshot (from the local Hub cache when offline).

The caller then checks for a bundle (``oasr.models.bundle.is_bundle``) before detecting a
checkpoint format.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from oasr import envs

__all__ = ["SourceNotFoundError", "resolve_source"]

# Files whose presence marks a folder as holding a model, strongest first.
MODEL_MARKERS = (
    "oasr_config.json",
    "model.bin",
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "config.json",
)
# Hub files worth fetching: configs, tokenizers, safetensors and CTranslate2 weights. Pickled
# weights are fetched only when a repository has nothing else.
_HUB_PATTERNS = ["*.json", "*.txt", "*.safetensors", "model.bin", "*.model", "*.tiktoken"]
_HUB_FALLBACK_PATTERNS = ["pytorch_model*.bin"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_PART_PACKAGE = re.compile(r"^(?P<prefix>.+)_part(?P<n>\d+)$")
_SEARCH_DEPTH = 3
_MANIFEST = ".oasr_source.json"


class SourceNotFoundError(FileNotFoundError):
    """A source string names no folder, installed model package or reachable Hub repository."""


def resolve_source(
    src: str | Path,
    *,
    cache_dir: str | Path | None = None,
    hub_cache_dir: str | Path | None = None,
    offline: bool | None = None,
) -> Path:
    """The local folder (or checkpoint file) ``src`` stands for.

    Args:
        src: a folder or file, an installed package name, a split-package prefix or name, or a
            Hub id.
        cache_dir: where joined split packages go (default: ``envs.cache_dir() / "sources"``).
        hub_cache_dir: the Hugging Face Hub cache (default: huggingface_hub's, i.e.
            ``HF_HUB_CACHE``).
        offline: use only the local Hub cache (default: huggingface_hub's ``HF_HUB_OFFLINE``).

    Raises:
        SourceNotFoundError: nothing matched; the message says what was tried.
    """
    path = Path(src).expanduser()
    if path.is_dir() or path.is_file():
        # A file (a .nemo) is a source only if a registered format claims it; detection says.
        return path.resolve()
    if path.exists():
        raise SourceNotFoundError(f"{src} is neither a regular file nor a folder; pass the "
                                  "checkpoint's folder or file")
    text = str(src)
    if _MODULE_NAME.match(text):
        found = _from_package(text, Path(cache_dir) if cache_dir else envs.cache_dir() / "sources")
        if found is not None:
            return found
    if _HUB_ID.match(text):
        return _from_hub(text, hub_cache_dir, offline)
    from oasr.models.catalog import closest_model_names

    close = closest_model_names(text)
    guess = f"did you mean {' or '.join(repr(n) for n in close)}? " if close else ""
    raise SourceNotFoundError(
        f"{src!r} is not a folder, not an installed model package and not a Hub id (org/name); "
        f"{guess}`oasr models` lists the model names"
    )


# -- installed packages -----------------------------------------------------------------------
def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _from_package(name: str, cache_root: Path) -> Path | None:
    pkg = _package_dir(name)
    m = _PART_PACKAGE.match(name)
    if pkg is not None and m and _part_file(pkg, int(m.group("n"))) is not None:
        return _join_split(m.group("prefix"), cache_root)
    if pkg is None:
        # A split model may be named by its prefix alone.
        if _package_dir(f"{name}_part1") is not None:
            return _join_split(name, cache_root)
        return None
    return _model_folder(pkg, name)


def _model_folder(pkg: Path, name: str) -> Path:
    """The shallowest folder under ``pkg`` holding a model marker file."""
    best: list[tuple[int, int, Path]] = []
    for root, dirs, files in os.walk(pkg):
        depth = len(Path(root).relative_to(pkg).parts)
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        if depth >= _SEARCH_DEPTH:
            dirs[:] = []
        ranks = [MODEL_MARKERS.index(f) for f in files if f in MODEL_MARKERS]
        if ranks:
            best.append((depth, min(ranks), Path(root)))
    if not best:
        raise SourceNotFoundError(
            f"package {name!r} ({pkg}) holds no model files (looked for {', '.join(MODEL_MARKERS)})"
        )
    best.sort(key=lambda x: (x[0], x[1]))
    top = [b for b in best if b[:2] == best[0][:2]]
    if len(top) > 1:
        listing = ", ".join(str(b[2]) for b in top)
        raise SourceNotFoundError(f"package {name!r} holds several models ({listing}); pass the "
                                  "folder you want")
    return top[0][2]


# -- split packages ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Part:
    package: str
    path: Path
    size: int
    mtime_ns: int


def _part_file(pkg: Path, n: int) -> Path | None:
    hits = [p for p in pkg.rglob(f"*.part{n}") if "__pycache__" not in p.parts and p.is_file()]
    if len(hits) > 1:
        raise SourceNotFoundError(f"{pkg} holds several *.part{n} files: {hits}")
    return hits[0] if hits else None


def _join_split(prefix: str, cache_root: Path) -> Path:
    """Join ``<prefix>_part1..N`` into ``cache_root/<prefix>`` (reused while unchanged)."""
    parts: list[_Part] = []
    n = 1
    while (pkg := _package_dir(f"{prefix}_part{n}")) is not None:
        f = _part_file(pkg, n)
        if f is None:
            raise SourceNotFoundError(f"package {prefix}_part{n} ({pkg}) has no *.part{n} file")
        st = f.stat()
        parts.append(_Part(f"{prefix}_part{n}", f, st.st_size, st.st_mtime_ns))
        n += 1
    if not parts:
        raise SourceNotFoundError(f"no package {prefix}_part1 is installed")
    joined_name = parts[0].path.name[: -len(".part1")]
    for i, p in enumerate(parts, start=1):
        if p.path.name != f"{joined_name}.part{i}":
            raise SourceNotFoundError(f"{p.path} does not continue {joined_name} (part {i})")
    total = sum(p.size for p in parts)
    manifest = {
        "file": joined_name,
        "size": total,
        "parts": [{"package": p.package, "path": str(p.path), "size": p.size,
                   "mtime_ns": p.mtime_ns} for p in parts],
    }
    dst = cache_root / prefix
    if _cached(dst, manifest):
        return dst

    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = cache_root / f"{prefix}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir()
        with open(tmp / joined_name, "wb") as out:
            for p in parts:
                with open(p.path, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 24)
        written = (tmp / joined_name).stat().st_size
        if written != total:
            raise OSError(f"joined {joined_name} has {written} bytes, the parts {total}")
        for p in parts:
            for other in p.path.parent.iterdir():
                if other.is_file() and other != p.path and other.name != "__init__.py":
                    if not (tmp / other.name).exists():
                        shutil.copy2(other, tmp / other.name)
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _join_into_place(tmp, dst, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dst


def _join_into_place(tmp: Path, dst: Path, manifest: dict) -> None:
    """``tmp`` becomes ``dst``. A join of the same parts that another process finished
    meanwhile is kept (it may be open in that process) and ``tmp`` dropped; a stale one is
    moved aside before it is deleted, so no reader ever sees a half-deleted folder."""
    if _cached(dst, manifest):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if dst.exists():
        stale = dst.parent / f"{dst.name}.stale-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(dst, stale)
        except FileNotFoundError:  # another run moved the same stale join aside first
            pass
        else:
            shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, dst)
    except OSError:
        if not _cached(dst, manifest):  # not another process's finished join
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _cached(dst: Path, manifest: dict) -> bool:
    try:
        recorded = json.loads((dst / _MANIFEST).read_text(encoding="utf-8"))
        size = (dst / manifest["file"]).stat().st_size
    except (OSError, ValueError):
        return False
    return recorded == manifest and size == manifest["size"]


# -- Hugging Face Hub -------------------------------------------------------------------------
def _from_hub(repo_id: str, cache_dir: str | Path | None, offline: bool | None) -> Path:
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import (
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise SourceNotFoundError(f"{repo_id!r} looks like a Hub id but huggingface_hub is not "
                                  "installed") from e
    if offline is None:
        offline = bool(constants.HF_HUB_OFFLINE)
    kwargs = {"cache_dir": str(cache_dir) if cache_dir else None, "local_files_only": offline}
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS, **kwargs))
        if not offline and not any((folder / m).is_file() for m in MODEL_MARKERS[1:5]):
            folder = Path(snapshot_download(repo_id, allow_patterns=_HUB_FALLBACK_PATTERNS,
                                            **kwargs))
    except RepositoryNotFoundError as e:
        raise SourceNotFoundError(f"no Hub repository {repo_id!r} (or it is private/gated and "
                                  "no token was given)") from e
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        how = ("the Hub is offline (HF_HUB_OFFLINE) and it is not in the local cache"
               if offline else "the Hub could not be reached and it is not in the local cache")
        raise SourceNotFoundError(
            f"cannot fetch {repo_id!r}: {how}. Download it where the Hub is reachable "
            "(huggingface-cli download) or pass a local folder."
        ) from e
    return folder
