"""Where graphs live and how they load: beside the model, found by name.

A graph ``NAME`` of a bundle is four files under ``<bundle>/graphs/``:

- ``NAME.fst``: the decoding graph, an OpenFST const FST (Kaldi's tools read it too);
- ``NAME.words.txt``: its output labels (Kaldi's ``words.txt``);
- ``NAME.lexicon.int``: the spellings it was built with, ``word-id unit-id ...`` per line (word
  timings cut the path's tokens into words with them);
- ``NAME.json``: what the decoder must know (``GraphInfo``).

``resolve_graph`` takes a path to a ``.fst`` (its companions found by the same stem, else
``words.txt`` in its folder) or a name looked up in the model's bundle. Loaded graphs are cached
by path, size and modification time, so engines sharing one graph hold it once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oasr.graphs.decoding_graph import DecodingGraph
from oasr.graphs.lexicon import LexiconError, SymbolTable, read_symbols, write_symbols
from oasr.graphs.openfst import FstArrays, read_fst_arrays, write_const_fst
from oasr.graphs.search import TOKEN_RULES

__all__ = ["GRAPHS_DIR", "GraphInfo", "GraphError", "LoadedGraph", "graph_names",
           "load_graph", "resolve_graph", "save_graph"]

GRAPHS_DIR = "graphs"
FORMAT_VERSION = 1


class GraphError(ValueError):
    """A graph that cannot be found or used; the message names the file and the fix."""


@dataclass
class GraphInfo:
    """``token_rule``: how tokens are read off a path (``oasr.graphs.search``); ``num_units``
    and ``blank``: the unit set the graph was built for (``None``: not recorded, e.g. a Kaldi
    graph); ``kind``: TLG, HLG, ...; ``build``: how it was made (the build report)."""

    format_version: int = FORMAT_VERSION
    kind: str = "TLG"
    token_rule: str = "collapse"
    num_units: int | None = None
    blank: int | None = None
    build: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> GraphInfo:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise GraphError(f"{path}: not readable graph metadata ({exc})") from exc
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        info = cls(**known)
        if info.token_rule not in TOKEN_RULES:
            raise GraphError(f"{path}: token_rule {info.token_rule!r}; valid: "
                             f"{', '.join(TOKEN_RULES)}")
        return info


@dataclass
class LoadedGraph:
    path: Path
    graph: DecodingGraph
    words: SymbolTable
    info: GraphInfo
    spellings: dict[str, list[tuple[int, ...]]] | None = None  # None: no lexicon beside it

    def word_text(self, labels: np.ndarray) -> list[str]:
        names = self.words.names
        missing = [int(x) for x in labels if int(x) not in names]
        if missing:
            raise GraphError(f"{self.path}: output label {missing[0]} is not in its words table")
        return [names[int(x)] for x in labels]


def _companion(fst: Path, suffix: str) -> Path:
    return fst.with_name(fst.stem + suffix)


def save_graph(folder: Path, name: str, fst: Any, words: SymbolTable, info: GraphInfo,
               lexicon: list[tuple[str, tuple[int, ...]]] | None = None) -> Path:
    """Write graph ``name`` into ``folder`` (made if needed); returns the ``.fst`` path. Each file
    is written beside its place and renamed into it."""
    if not name or "/" in name or name.startswith("."):
        raise GraphError(f"graph name {name!r}: use a plain file name (letters, digits, -_.)")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.fst"

    def place(path: Path, write: Any) -> None:
        tmp = path.with_name(path.name + ".tmp")
        write(tmp)
        tmp.replace(path)

    place(target, lambda p: write_const_fst(fst, p))
    place(_companion(target, ".words.txt"), lambda p: write_symbols(words, p))
    if lexicon is not None:
        def write_lexicon(p: Path) -> None:
            with open(p, "w", encoding="utf-8") as fh:
                for word, units in lexicon:
                    fh.write(f"{words.ids[word]} " + " ".join(map(str, units)) + "\n")
        place(_companion(target, ".lexicon.int"), write_lexicon)
    place(_companion(target, ".json"),
          lambda p: p.write_text(json.dumps(asdict(info), indent=2) + "\n", encoding="utf-8"))
    _CACHE.pop(target.resolve(), None)
    return target


def _read_spellings(path: Path, words: SymbolTable) -> dict[str, list[tuple[int, ...]]]:
    out: dict[str, list[tuple[int, ...]]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                ids = [int(x) for x in parts]
            except ValueError as exc:
                raise GraphError(f"{path}:{lineno}: expected 'word-id unit-id ...'") from exc
            if ids[0] not in words.names or len(ids) < 2:
                raise GraphError(f"{path}:{lineno}: word id {ids[0]} is not in the words table "
                                 "or has no spelling")
            out.setdefault(words.names[ids[0]], []).append(tuple(ids[1:]))
    return out


def _words_for(fst: Path) -> Path:
    for candidate in (_companion(fst, ".words.txt"), fst.parent / "words.txt"):
        if candidate.is_file():
            return candidate
    raise GraphError(f"{fst}: no words table beside it ({fst.stem}.words.txt or words.txt); "
                     "the decoder needs the graph's output symbols to write text")


_CACHE: dict[Path, tuple[tuple[Any, ...], LoadedGraph]] = {}
_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[Any, ...]:
    """Sizes and modification times of the graph and its companions (a rewrite of any of
    them reloads it)."""
    files = [path, *(_companion(path, x) for x in (".json", ".words.txt", ".lexicon.int")),
             path.parent / "words.txt"]
    return tuple((f.stat().st_size, f.stat().st_mtime_ns) if f.is_file() else None
                 for f in files)


def load_graph(path: str | Path) -> LoadedGraph:
    """The graph at ``path`` (a ``.fst``) with its companions."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"graph {path} does not exist")
    key = path.resolve()
    stamp = _stamp(path)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    meta = _companion(path, ".json")
    info = GraphInfo.read(meta) if meta.is_file() else GraphInfo(kind="FST")
    try:
        words = read_symbols(_words_for(path))
    except LexiconError as exc:
        raise GraphError(str(exc)) from exc
    arrays: FstArrays = read_fst_arrays(path)
    graph = DecodingGraph.from_arrays(arrays)
    lex = _companion(path, ".lexicon.int")
    spellings = _read_spellings(lex, words) if lex.is_file() else None
    loaded = LoadedGraph(path, graph, words, info, spellings)
    with _LOCK:
        _CACHE[key] = (stamp, loaded)
    return loaded


def graph_names(bundle: Path) -> list[str]:
    folder = bundle / GRAPHS_DIR
    return sorted(p.stem for p in folder.glob("*.fst")) if folder.is_dir() else []


def resolve_graph(spec: str, bundle: Path | None) -> Path:
    """``spec`` as a path to an existing ``.fst``, else as the name of a graph in ``bundle``."""
    as_path = Path(spec).expanduser()
    if as_path.suffix == ".fst" or "/" in spec:
        if as_path.is_file():
            return as_path
        raise GraphError(f"graph {spec} does not exist")
    if bundle is None:
        raise GraphError(f"graph {spec!r} is a name, but the model is not a bundle folder to "
                         "look it up in; pass the graph's .fst path")
    found = bundle / GRAPHS_DIR / f"{spec}.fst"
    if found.is_file():
        return found
    names = graph_names(bundle)
    raise GraphError(f"the model at {bundle} has no graph {spec!r} (it has: "
                     f"{', '.join(names) or 'none'}); build one with 'oasr graph build'")
