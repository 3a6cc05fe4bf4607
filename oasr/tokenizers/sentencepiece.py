"""The ``sentencepiece`` tokenizer kind: a sentencepiece model (``bpe.model``, ``unigram.model``).

``encode`` and ``decode`` are the library's. ``token_pieces`` and ``decode_incremental`` apply
the library's own decoding rules piece by piece, in one pass:

- a control piece (``<s>``, ``</s>``, ...) renders as "", ``<unk>`` as the model's unknown
  surface (``" ⁇ "`` unless trained otherwise), any other piece as itself with ``▁`` -> space;
- until the text has begun, a piece's leading ``▁`` is dropped when the model adds a dummy
  prefix or removes extra whitespace (only the first one when it keeps extra whitespace);
- a run of byte-fallback pieces (``<0xE4>``) is read one character at a time: a complete
  character goes to the piece of its last byte (the others get ""), and each byte that cannot
  start a valid character becomes one ``"\\ufffd"`` on its own piece.

The normalizer flags and the unknown surface are read from the model's serialized proto
(three fields; the protobuf package is not needed). A model with a denormalizer rewrites the
joined text after decoding, so it cannot be cut into pieces; it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sentencepiece as spm

from oasr.tokenizers.base import REPLACEMENT_CHAR, Tokenizer, TokenizerSpec

__all__ = ["REPLACEMENT_CHAR", "SentencePieceState", "SentencePieceTokenizer", "ModelFlags"]

WORD_START = "\u2581"  # "▁"
_T = TypeVar("_T", bound="SentencePieceTokenizer")

# Piece kinds, as far as decoding cares.
_NORMAL, _CONTROL, _UNKNOWN, _BYTE = range(4)


# -- the three model fields decoding depends on ---------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one protobuf message's top-level fields."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in a sentencepiece model")
        yield number, value


@dataclass(frozen=True)
class ModelFlags:
    """What decoding reads from ``ModelProto`` (proto2 defaults when a field is absent).

    ``add_dummy_prefix`` and ``remove_extra_whitespaces`` are ``NormalizerSpec`` fields 3 and 4,
    ``unk_surface`` ``TrainerSpec`` field 44; ``has_denormalizer``: ``ModelProto`` field 5
    carries a non-empty ``precompiled_charsmap`` (field 2).
    """

    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    unk_surface: str = " \u2047 "
    has_denormalizer: bool = False

    @classmethod
    def parse(cls, model_proto: bytes) -> ModelFlags:
        flags: dict[str, Any] = {}
        for number, value in _fields(model_proto):
            if number == 2 and isinstance(value, bytes):  # trainer_spec
                for sub, sub_value in _fields(value):
                    if sub == 44 and isinstance(sub_value, bytes):
                        flags["unk_surface"] = sub_value.decode("utf-8")
            elif number == 3 and isinstance(value, bytes):  # normalizer_spec
                for sub, sub_value in _fields(value):
                    if sub == 3:
                        flags["add_dummy_prefix"] = bool(sub_value)
                    elif sub == 4:
                        flags["remove_extra_whitespaces"] = bool(sub_value)
            elif number == 5 and isinstance(value, bytes):  # denormalizer_spec
                charsmap = [v for sub, v in _fields(value) if sub == 2]
                flags["has_denormalizer"] = bool(charsmap and charsmap[-1])
        return cls(**flags)


# -- byte-fallback runs -----------------------------------------------------------------------
def _char_length(lead: int) -> int:
    """Bytes of the UTF-8 character ``lead`` starts (0: it cannot start one)."""
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return 0


def _drain(run: list[tuple[int, int]], closed: bool) -> Iterator[tuple[int, str]]:
    """Resolve the front of a byte run: yields (position, text) and pops what it resolved.

    ``run`` holds (byte, position) pairs not resolved yet. A character is resolved when it is
    complete and valid (its text goes to its last byte's position) or can no longer become
    valid (the lead byte gets ``"\\ufffd"``); an unfinished character waits unless ``closed``.
    """
    while run:
        lead = run[0][0]
        size = _char_length(lead)
        if 0 < size <= len(run):
            try:
                text = bytes(b for b, _ in run[:size]).decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                yield run[size - 1][1], text
                del run[:size]
                continue
        elif size > len(run) and not closed and all(0x80 <= b < 0xC0 for b, _ in run[1:]):
            return  # may still complete
        yield run[0][1], REPLACEMENT_CHAR
        del run[0]


@dataclass(frozen=True)
class SentencePieceState:
    """A stream's decoding state: whether a leading ``▁`` may still be dropped, and the bytes
    of a character that has not completed yet."""

    at_start: bool = True
    pending: tuple[int, ...] = ()


class SentencePieceTokenizer(Tokenizer):
    """A tokenizer over a sentencepiece model.

    Args:
        processor: a loaded ``sentencepiece.SentencePieceProcessor``.
        model_proto: its serialized model (read for the decoding flags); taken from the
            processor when omitted.
    """

    kind = "sentencepiece"
    FILE_ROLES = ("model",)
    OPTIONS: tuple[str, ...] = ()

    def __init__(self, processor: spm.SentencePieceProcessor, model_proto: bytes | None = None):
        self._sp = processor
        proto = model_proto if model_proto is not None else processor.serialized_model_proto()
        self.flags = ModelFlags.parse(proto)
        if self.flags.has_denormalizer:
            raise ValueError(
                "this sentencepiece model has a denormalizer, which rewrites the decoded text "
                "as a whole; its text cannot be cut into token pieces"
            )
        self._strip_start = self.flags.add_dummy_prefix or self.flags.remove_extra_whitespaces
        self._vocab_size = processor.get_piece_size()
        self._units: dict[int, tuple[int, str | int]] = {}  # id -> (kind, text or byte)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_spec(cls: type[_T], spec: TokenizerSpec, folder: Path) -> _T:
        if set(spec.files) != {"model"}:
            raise ValueError(
                f"a sentencepiece tokenizer takes exactly the file role 'model'; the spec names "
                f"{sorted(spec.files)}"
            )
        if spec.options:
            raise ValueError(
                f"unknown option(s) {sorted(spec.options)} for tokenizer kind {cls.kind!r}; "
                "it takes none"
            )
        return cls.from_file(Path(folder) / spec.files["model"])

    @classmethod
    def from_file(cls: type[_T], path: str | Path) -> _T:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sentencepiece model not found: {path}")
        proto = path.read_bytes()
        return cls(spm.SentencePieceProcessor(model_proto=proto), proto)

    @property
    def processor(self) -> spm.SentencePieceProcessor:
        return self._sp

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def token_to_id(self, token: str) -> int | None:
        token_id = self._sp.piece_to_id(token)
        # The library answers <unk>'s id for a piece it does not know.
        return token_id if self._sp.id_to_piece(token_id) == token else None

    def id_to_token(self, token_id: int) -> str | None:
        return self._sp.id_to_piece(token_id) if 0 <= token_id < self._vocab_size else None

    @staticmethod
    def _present(token_id: int) -> int | None:
        return token_id if token_id >= 0 else None

    @property
    def unk_id(self) -> int | None:
        return self._present(self._sp.unk_id())

    @property
    def bos_id(self) -> int | None:
        return self._present(self._sp.bos_id())

    @property
    def eos_id(self) -> int | None:
        return self._present(self._sp.eos_id())

    @property
    def pad_id(self) -> int | None:
        return self._present(self._sp.pad_id())

    def _check_ids(self, ids: Sequence[int]) -> None:
        if ids and (min(ids) < 0 or max(ids) >= self._vocab_size):
            bad = next(i for i in ids if i < 0 or i >= self._vocab_size)
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self._vocab_size})")

    # -- ids <-> text ---------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text, out_type=int))

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        return self._sp.decode(ids)

    # -- pieces ---------------------------------------------------------------------------
    def _unit(self, token_id: int) -> tuple[int, str | int]:
        unit = self._units.get(token_id)
        if unit is None:
            piece = self._sp.id_to_piece(token_id)
            if self._sp.is_byte(token_id):
                unit = (_BYTE, int(piece[3:5], 16))  # "<0xE4>"
            elif self._sp.is_control(token_id):
                unit = (_CONTROL, "")
            elif self._sp.is_unknown(token_id):
                unit = (_UNKNOWN, self.flags.unk_surface)
            else:
                unit = (_NORMAL, piece)
            self._units[token_id] = unit
        return unit

    def _surface(self, kind: int, piece: str, at_start: bool) -> tuple[str, bool]:
        """A non-byte piece's text, and whether the text is still at its start after it."""
        if kind != _NORMAL:
            return piece, at_start and not piece
        consumed = False
        if at_start and self._strip_start and piece.startswith(WORD_START):
            piece, consumed = piece[1:], True
        text = piece.replace(WORD_START, " ")
        # Keeping extra whitespace, only the first leading "▁" is dropped.
        ends_start = bool(text) or (consumed and not self.flags.remove_extra_whitespaces)
        return text, at_start and not ends_start

    def _walk(
        self, ids: Sequence[int], state: SentencePieceState, close: bool
    ) -> Iterator[tuple[int, str] | SentencePieceState]:
        """(position in ``ids``, text) in text order, then the state after ``ids``.

        A byte's text may come after later ids' texts were yielded; it carries its own
        position. ``close`` ends the stream: an unfinished character's bytes are resolved.
        """
        at_start = state.at_start
        run = [(b, -1) for b in state.pending]  # held bytes of earlier calls: no position here
        for position, token_id in enumerate(ids):
            kind, value = self._unit(token_id)
            if kind == _BYTE:
                run.append((int(value), position))
            for resolved in _drain(run, closed=kind != _BYTE):
                at_start = False  # a resolved byte's text is never empty
                yield resolved
            if kind != _BYTE:
                text, at_start = self._surface(kind, str(value), at_start)
                yield position, text
        if close:
            yield from _drain(run, closed=True)
        yield SentencePieceState(at_start, tuple(b for b, _ in run))

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """One string per id, ``"".join(pieces) == decode(ids)``, in one pass."""
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        pieces = [""] * len(ids)
        for item in self._walk(ids, SentencePieceState(), close=True):
            if not isinstance(item, SentencePieceState):
                position, text = item
                pieces[position] += text
        return pieces

    def decode_incremental(
        self, ids: Sequence[int], state: SentencePieceState | None = None
    ) -> tuple[str, SentencePieceState]:
        """The text ``ids`` add after ``state``; the bytes of an unfinished character wait.

        Concatenating every returned text and a final ``flush_incremental`` equals ``decode``
        of the whole stream.
        """
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        out: list[str] = []
        final = SentencePieceState()
        for item in self._walk(ids, state or SentencePieceState(), close=False):
            if isinstance(item, SentencePieceState):
                final = item
            else:
                out.append(item[1])
        return "".join(out), final

    def flush_incremental(self, state: SentencePieceState | None) -> str:
        """At the end of a stream: one ``"\\ufffd"`` per byte of an unfinished character."""
        return REPLACEMENT_CHAR * len(state.pending) if state is not None else ""
