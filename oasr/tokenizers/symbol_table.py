"""The ``symbol_table`` tokenizer kind: a WeNet ``units.txt`` / k2 ``tokens.txt`` unit list.

Each line of the file is ``<unit> <id>``. Rendering is piece-local: ``▁`` (U+2581) marks a word
start and renders as a space, special units (``<blank>``, ``<blk>``, ``<unk>``, ``<sos/eos>``,
``<sos>``, ``<eos>``, and any the spec's options declare) render as "", and any other unit
renders as itself, so CJK character units join with no space. The text never starts with a
space: the spaces a rendering would open with are dropped, which needs only one bit of state.

``encode`` is greedy longest-match over the units. It is exact for character vocabularies; for
a BPE vocabulary it is only an approximation of the sentencepiece model's encoding (that model
is not part of a unit list), good enough for prompts and tests, not for scoring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from oasr.tokenizers.base import Tokenizer, TokenizerSpec

__all__ = ["DEFAULT_SPECIAL_UNITS", "WORD_START", "SymbolTableTokenizer", "read_symbol_table"]

WORD_START = "\u2581"  # "▁"
# Units that never render: CTC blank (WeNet "<blank>", k2 "<blk>"), unknown, sentence marks.
DEFAULT_SPECIAL_UNITS = ("<blank>", "<blk>", "<unk>", "<sos/eos>", "<sos>", "<eos>")
_T = TypeVar("_T", bound="SymbolTableTokenizer")


def read_symbol_table(path: Path) -> dict[int, str]:
    """Id -> unit of a ``<unit> <id>`` file; blank lines are skipped, anything else malformed
    (a missing or non-integer id, a repeated id or unit) raises, naming the line."""
    table: dict[int, str] = {}
    seen: dict[str, int] = {}
    # split("\n"), not splitlines(): a unit may be a character splitlines() breaks on.
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.rsplit(maxsplit=1)
        try:
            unit, token_id = fields[0].strip(), int(fields[1])
        except (IndexError, ValueError):
            raise ValueError(f"{path}:{number}: expected '<unit> <id>', got {line!r}") from None
        if not unit:
            raise ValueError(f"{path}:{number}: expected '<unit> <id>', got {line!r}")
        if token_id < 0:
            raise ValueError(f"{path}:{number}: negative id {token_id}")
        if token_id in table:
            raise ValueError(f"{path}:{number}: id {token_id} already names {table[token_id]!r}")
        if unit in seen:
            raise ValueError(f"{path}:{number}: unit {unit!r} already has id {seen[unit]}")
        table[token_id] = unit
        seen[unit] = token_id
    if not table:
        raise ValueError(f"{path}: no units")
    return table


class SymbolTableTokenizer(Tokenizer):
    """A tokenizer over a unit list (see the module docstring for the rendering rules).

    Args:
        units: id -> unit. Ids need not be contiguous; ``vocab_size`` is the largest id + 1 and
            an id without a unit is refused.
        special_units: units rendered as "", on top of ``DEFAULT_SPECIAL_UNITS``.
        literal_units: units of ``DEFAULT_SPECIAL_UNITS`` rendered as themselves instead (k2 /
            icefall's ``tokens.txt`` decoding prints ``<unk>``).

    ``decode_incremental``'s state is a bool: whether text has been rendered yet (``None`` at
    the start of a stream).
    """

    kind = "symbol_table"
    FILE_ROLES = ("units",)
    OPTIONS = ("special_units", "literal_units")

    def __init__(self, units: Mapping[int, str], *, special_units: Sequence[str] = (),
                 literal_units: Sequence[str] = ()) -> None:
        for name, value in (("special_units", special_units), ("literal_units", literal_units)):
            if isinstance(value, str):
                raise TypeError(f"{name} is a list of units, not one string")
        self._units = dict(units)
        self._ids = {unit: token_id for token_id, unit in self._units.items()}
        # literal_units: special units that render as themselves (icefall prints "<unk>")
        self._special = ((frozenset(DEFAULT_SPECIAL_UNITS) | frozenset(special_units))
                         - frozenset(literal_units))
        self._vocab_size = max(self._units) + 1
        # What each unit renders as inside the text ("" for a special unit).
        self._render = {
            token_id: "" if unit in self._special else unit.replace(WORD_START, " ")
            for token_id, unit in self._units.items()
        }
        # Units encode may produce: all but the special ones.
        self._matchable = {u: i for u, i in self._ids.items() if u not in self._special}
        self._longest = max((len(u) for u in self._matchable), default=0)
        self._marks_words = any(u.startswith(WORD_START) for u in self._matchable)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_spec(cls: type[_T], spec: TokenizerSpec, folder: Path) -> _T:
        unknown = sorted(set(spec.files) - set(cls.FILE_ROLES))
        if unknown or "units" not in spec.files:
            raise ValueError(
                f"a symbol_table tokenizer takes exactly the file role 'units'; the spec names "
                f"{sorted(spec.files)}"
            )
        bad = sorted(set(spec.options) - set(cls.OPTIONS))
        if bad:
            raise ValueError(
                f"unknown option(s) {bad} for tokenizer kind {cls.kind!r}; "
                f"valid options: {cls.OPTIONS}"
            )
        path = Path(folder) / spec.files["units"]
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file for role 'units' not found: {path}")
        return cls(read_symbol_table(path), **spec.options)

    @classmethod
    def from_file(cls: type[_T], path: str | Path, **options: Any) -> _T:
        return cls(read_symbol_table(Path(path)), **options)

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def units(self) -> dict[int, str]:
        """Id -> unit (a copy)."""
        return dict(self._units)

    def token_to_id(self, token: str) -> int | None:
        return self._ids.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._units.get(token_id)

    def is_special(self, token_id: int) -> bool:
        return self._units.get(token_id) in self._special

    def _first(self, *units: str) -> int | None:
        return next((self._ids[u] for u in units if u in self._ids), None)

    @property
    def blank_id(self) -> int | None:
        """``<blank>`` (WeNet) or ``<blk>`` (k2); None when the table has neither."""
        return self._first("<blank>", "<blk>")

    @property
    def unk_id(self) -> int | None:
        return self._first("<unk>")

    @property
    def sos_id(self) -> int | None:
        """``<sos/eos>`` (WeNet shares one unit for both) or ``<sos>``."""
        return self._first("<sos/eos>", "<sos>")

    @property
    def eos_id(self) -> int | None:
        """``<sos/eos>`` or ``<eos>``."""
        return self._first("<sos/eos>", "<eos>")

    def _check_ids(self, ids: Sequence[int]) -> None:
        for token_id in ids:
            if token_id not in self._units:
                where = (
                    f"outside the vocabulary [0, {self._vocab_size})"
                    if not 0 <= token_id < self._vocab_size
                    else "not listed in the unit table"
                )
                raise ValueError(f"token id {token_id} is {where}")

    # -- text -> ids ----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Greedy longest-match, word by word; a word opens with ``▁`` when the table marks
        word starts and has a unit for that start. A character no unit covers becomes
        ``<unk>``, or raises when the table has none."""
        ids: list[int] = []
        for word in text.split():
            target = WORD_START + word if self._marks_words else word
            pos = 0
            if self._marks_words and not self._match_at(target, 0):
                pos = 1  # no unit starts this word with a marker: match it bare
            while pos < len(target):
                length = self._match_at(target, pos)
                if length:
                    ids.append(self._matchable[target[pos : pos + length]])
                    pos += length
                elif self.unk_id is not None:
                    ids.append(self.unk_id)
                    pos += 1
                else:
                    raise ValueError(
                        f"no unit covers {target[pos]!r} in {word!r} and the table has no <unk>"
                    )
        return ids

    def _match_at(self, text: str, pos: int) -> int:
        """Length of the longest unit that ``text[pos:]`` starts with (0: none)."""
        for length in range(min(self._longest, len(text) - pos), 0, -1):
            if text[pos : pos + length] in self._matchable:
                return length
        return 0

    # -- ids -> text ----------------------------------------------------------------------
    def _piece(self, token_id: int, started: bool) -> tuple[str, bool]:
        text = self._render[token_id] if started else self._render[token_id].lstrip(" ")
        return text, started or bool(text)

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """One string per id, ``"".join(pieces) == decode(ids)``; each piece is its unit's."""
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        pieces: list[str] = []
        started = False
        for token_id in ids:
            piece, started = self._piece(token_id, started)
            pieces.append(piece)
        return pieces

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.token_pieces(ids))

    def decode_incremental(self, ids: Sequence[int], state: bool | None = None) -> tuple[str, bool]:
        """The text ``ids`` add after a stream whose state is ``state``; piece-local."""
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        started = bool(state)
        out: list[str] = []
        for token_id in ids:
            piece, started = self._piece(token_id, started)
            out.append(piece)
        return "".join(out), started
