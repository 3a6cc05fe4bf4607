"""Lexicons: each word's spellings in the model's units, and the symbol tables of a graph.

A lexicon file is Kaldi's ``lexicon.txt``: one spelling per line, ``WORD unit unit ...``, the
units named as the model's unit table names them (``tokens.txt`` / ``units.txt``); a word may
have several lines. ``spell_words`` makes one from a word list through the model's tokenizer
(each word encoded alone, a BPE model's word-initial ``▁`` included), the lexicon a BPE CTC model
needs.

Disambiguation (Kaldi's ``add_lex_disambig.pl``): a spelling that is a prefix of another or
that two words share gets a closing ``#k``, so L o G determinizes; ``#0`` is the grammar's
backoff symbol.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Lexicon", "LexiconError", "SymbolTable", "read_lexicon", "spell_words",
           "read_symbols", "write_symbols"]

EPS = "<eps>"


class LexiconError(ValueError):
    """A lexicon or symbol table that cannot be used; the message names the file, line and fix."""


@dataclass
class SymbolTable:
    """Names <-> integer labels (Kaldi's ``words.txt`` / ``tokens.txt`` text format)."""

    names: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ids = {n: i for i, n in self.names.items()}

    def add(self, name: str) -> int:
        if name in self.ids:
            return self.ids[name]
        i = max(self.names, default=-1) + 1
        self.names[i] = name
        self.ids[name] = i
        return i

    def __len__(self) -> int:
        return len(self.names)


def read_symbols(path: str | Path) -> SymbolTable:
    names: dict[int, str] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise LexiconError(f"{path}:{lineno}: expected 'symbol id', got {line.strip()!r}")
            i = int(parts[1])
            if i in names:
                raise LexiconError(f"{path}:{lineno}: id {i} is given twice")
            names[i] = parts[0]
    return SymbolTable(names)


def write_symbols(table: SymbolTable, path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in sorted(table.names):
            fh.write(f"{table.names[i]} {i}\n")


@dataclass
class Lexicon:
    """``entries``: (word, unit ids) in file order; a word may repeat with other spellings."""

    entries: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)

    @property
    def words(self) -> list[str]:
        seen: dict[str, None] = {}
        for w, _ in self.entries:
            seen.setdefault(w, None)
        return list(seen)

    def spellings(self) -> dict[str, list[tuple[int, ...]]]:
        out: dict[str, list[tuple[int, ...]]] = defaultdict(list)
        for w, units in self.entries:
            if units not in out[w]:
                out[w].append(units)
        return dict(out)

    def restrict(self, words: Iterable[str]) -> Lexicon:
        keep = set(words)
        return Lexicon([(w, u) for w, u in self.entries if w in keep])

    def disambiguated(self) -> tuple[list[tuple[str, tuple[int, ...], int]], int]:
        """Each entry with its closing disambiguation index (0: none, k: ``#k``), and the
        highest index used."""
        count: dict[tuple[int, ...], int] = defaultdict(int)
        prefixes: set[tuple[int, ...]] = set()
        for _, units in self.entries:
            count[units] += 1
            for i in range(1, len(units)):
                prefixes.add(units[:i])
        next_index: dict[tuple[int, ...], int] = defaultdict(int)
        top = 0
        out = []
        for word, units in self.entries:
            k = 0
            if count[units] > 1 or units in prefixes:
                next_index[units] += 1
                k = next_index[units]
                top = max(top, k)
            out.append((word, units, k))
        return out, top

    def write(self, path: str | Path, units: SymbolTable) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for word, ids in self.entries:
                fh.write(word + " " + " ".join(units.names[i] for i in ids) + "\n")


def read_lexicon(path: str | Path, units: SymbolTable) -> Lexicon:
    """Read ``WORD unit unit ...`` lines; a unit the model's table lacks is refused by line."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 2:
                raise LexiconError(f"{path}:{lineno}: {parts[0]!r} has no spelling; a lexicon "
                                   "line is 'WORD unit unit ...'")
            missing = [u for u in parts[1:] if u not in units.ids]
            if missing:
                raise LexiconError(f"{path}:{lineno}: {parts[0]!r} is spelt with units the "
                                   f"model does not have ({', '.join(missing[:5])}); spell it "
                                   "with the model's units (its tokens.txt / units.txt)")
            entries.append((parts[0], tuple(units.ids[u] for u in parts[1:])))
    if not entries:
        raise LexiconError(f"{path}: the lexicon is empty")
    return Lexicon(entries)


def spell_words(words: Sequence[str], tokenizer: Any, blank: int,
                unk: int | None = None) -> tuple[Lexicon, list[str]]:
    """One spelling per word through ``tokenizer.encode``; the words it cannot spell (nothing,
    the unknown unit or the blank) are returned apart, not spelt."""
    entries, unspellable = [], []
    for word in words:
        ids = tuple(int(i) for i in tokenizer.encode(word))
        if not ids or blank in ids or (unk is not None and unk in ids):
            unspellable.append(word)
            continue
        entries.append((word, ids))
    return Lexicon(entries), unspellable
