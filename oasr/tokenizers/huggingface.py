"""The ``huggingface`` tokenizer kind: ids <-> text through the `tokenizers` library.

Streaming text comes from an anchored window, the scheme of vLLM's ``detokenize_incrementally``:
a byte-level BPE id may hold half of a UTF-8 character, so an id cannot be rendered alone. The
window starts at the last point where the rendered text was known to be complete (the *prefix*);
each step renders the window and emits what lies past the prefix's text, but only once that text
no longer ends with the replacement character ``"\\ufffd"``. Rendering a small window instead of the
whole prefix keeps a stream linear in its length.

``token_pieces`` of a byte-level vocabulary (GPT-2, Whisper, most speech LLMs) needs no rendering
at all: each id's bytes come from the byte-level alphabet, and one incremental UTF-8 decoder
(replacing invalid sequences as the backend's lossy conversion does) hands every character to
the id whose bytes complete it. Other decoders keep the window scheme.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as Backend

from oasr.tokenizers.base import REPLACEMENT_CHAR, Tokenizer, TokenizerSpec

__all__ = [
    "BYTE_OF_CHAR",
    "REPLACEMENT_CHAR",
    "HuggingFaceTokenizer",
    "IncrementalState",
    "byte_level_bytes",
    "load_backend",
]

_T = TypeVar("_T", bound="HuggingFaceTokenizer")

# Roles a spec's ``files`` may name. ``tokenizer_json`` wins; otherwise a GPT-2 style byte-level
# BPE is assembled from ``vocab_json`` + ``merges_txt`` (+ ``added_tokens_json``).
FILE_ROLES = ("tokenizer_json", "vocab_json", "merges_txt", "added_tokens_json")


@dataclass(frozen=True)
class IncrementalState:
    """Where a stream's rendering stands.

    Attributes:
        window: the ids from the prefix anchor on (a short tail of the stream, not all of it).
        read: how many ids of ``window`` form the prefix, whose text was already emitted.
        prefix_len: ``len(decode(window[:read]))``; what lies beyond it in a rendering of the
            window is new text.

    Frozen and small, so a state can be kept per hypothesis and forked freely.
    """

    window: tuple[int, ...] = ()
    read: int = 0
    prefix_len: int = 0


def _resolve(folder: Path, files: Mapping[str, str], role: str) -> Path:
    path = folder / files[role]
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file for role {role!r} not found: {path}")
    return path


def _byte_level_bpe(vocab: Path, merges: Path, added_tokens: Path | None) -> Backend:
    """A GPT-2 style byte-level BPE from ``vocab.json`` + ``merges.txt`` (+ ``added_tokens.json``).

    Every entry of ``added_tokens.json`` (``{content: id}``) is added as a special token in id
    order; the ids the backend assigns must be the ones the file states, or the file does not
    belong to this vocabulary and loading fails.
    """
    backend = Backend(models.BPE.from_file(str(vocab), str(merges)))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    if added_tokens is None:
        return backend
    table: dict[str, int] = json.loads(added_tokens.read_text(encoding="utf-8"))
    ordered = sorted(table.items(), key=lambda item: item[1])
    backend.add_special_tokens(
        [AddedToken(content, special=True, normalized=False) for content, _ in ordered]
    )
    wrong = [(c, i, backend.token_to_id(c)) for c, i in ordered if backend.token_to_id(c) != i]
    if wrong:
        content, want, got = wrong[0]
        raise ValueError(
            f"{added_tokens}: {len(wrong)} added token(s) do not follow the vocabulary, e.g. "
            f"{content!r} should be id {want} but the vocabulary assigns {got}"
        )
    return backend


def load_backend(files: Mapping[str, str], folder: Path) -> Backend:
    """Build the `tokenizers` backend a spec's ``files`` describe (see ``FILE_ROLES``)."""
    unknown = sorted(set(files) - set(FILE_ROLES))
    if unknown:
        raise ValueError(f"unknown tokenizer file role(s) {unknown}; valid roles: {FILE_ROLES}")
    if "tokenizer_json" in files:
        return Backend.from_file(str(_resolve(folder, files, "tokenizer_json")))
    if "vocab_json" in files and "merges_txt" in files:
        added = (
            _resolve(folder, files, "added_tokens_json") if "added_tokens_json" in files else None
        )
        return _byte_level_bpe(
            _resolve(folder, files, "vocab_json"), _resolve(folder, files, "merges_txt"), added
        )
    raise ValueError(
        "a huggingface tokenizer needs the file role 'tokenizer_json', or 'vocab_json' and "
        f"'merges_txt'; the spec names {sorted(files)}"
    )


def _byte_level_alphabet() -> dict[str, int]:
    """Character -> byte of the byte-level alphabet (GPT-2's ``bytes_to_unicode``, inverted).

    Printable Latin-1 bytes stand for themselves; the other 68 bytes, in byte order, take the
    characters from U+0100 on.
    """
    printable = {
        *range(0x21, 0x7E + 1),  # "!" .. "~"
        *range(0xA1, 0xAC + 1),  # "¡" .. "¬"
        *range(0xAE, 0xFF + 1),  # "®" .. "ÿ"
    }
    table: dict[str, int] = {}
    spare = 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + spare)] = byte
            spare += 1
    return table


BYTE_OF_CHAR = _byte_level_alphabet()


def byte_level_bytes(token: str) -> bytes:
    """The bytes a ``ByteLevel`` decoder turns ``token`` into.

    A token with a character outside the alphabet (an added token such as ``"<|ja|>"`` is inside
    it; one with spaces or CJK text is not) contributes its own UTF-8 bytes, as the decoder does.
    """
    try:
        return bytes(BYTE_OF_CHAR[ch] for ch in token)
    except KeyError:
        return token.encode("utf-8")


def _recut(pieces: list[str], text: str) -> list[str]:
    """Cut ``text`` at the cumulative lengths of ``pieces`` (the last piece takes the rest)."""
    out: list[str] = []
    pos = 0
    for piece in pieces[:-1]:
        end = min(pos + len(piece), len(text))
        out.append(text[pos:end])
        pos = end
    out.append(text[pos:])
    return out


class HuggingFaceTokenizer(Tokenizer):
    """A tokenizer over a `tokenizers` backend (``tokenizer.json`` or byte-level BPE files).

    Args:
        backend: the `tokenizers.Tokenizer`.
        skip_special_tokens: ``decode``'s default for dropping special (added) tokens.
        add_special_tokens: whether ``encode`` applies the backend's post-processor template;
            off by default, since a recognizer's prompts are assembled by the model's code.
    """

    kind = "huggingface"
    OPTIONS = ("skip_special_tokens", "add_special_tokens")

    def __init__(
        self,
        backend: Backend,
        *,
        skip_special_tokens: bool = True,
        add_special_tokens: bool = False,
    ) -> None:
        self._backend = backend
        self.skip_special_tokens = skip_special_tokens
        self.add_special_tokens = add_special_tokens
        # The backend skips a token when its text is a special token's content.
        self._special_contents = frozenset(
            token.content for token in backend.get_added_tokens_decoder().values() if token.special
        )
        self._byte_level = isinstance(backend.decoder, decoders.ByteLevel)
        self._token_bytes: dict[int, tuple[bytes, bool]] = {}  # id -> (bytes, is special)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_spec(cls: type[_T], spec: TokenizerSpec, folder: Path) -> _T:
        unknown = sorted(set(spec.options) - set(cls.OPTIONS))
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for tokenizer kind {cls.kind!r}; "
                f"valid options: {cls.OPTIONS}"
            )
        return cls(load_backend(spec.files, Path(folder)), **spec.options)

    @classmethod
    def from_file(cls: type[_T], tokenizer_json: str | Path, **options: Any) -> _T:
        path = Path(tokenizer_json)
        return cls(load_backend({"tokenizer_json": path.name}, path.parent), **options)

    @property
    def backend(self) -> Backend:
        return self._backend

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    def _check_ids(self, ids: Sequence[int]) -> None:
        # The backend drops unknown ids silently; an id out of range is a caller's bug.
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if i < 0 or i >= self.vocab_size)
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")

    # -- ids <-> text ---------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=self.add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool | None = None) -> str:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        skip = self.skip_special_tokens if skip_special_tokens is None else skip_special_tokens
        return self._backend.decode(ids, skip_special_tokens=skip)

    # -- streaming ------------------------------------------------------------------------
    def decode_incremental(
        self, ids: Sequence[int], state: IncrementalState | None = None
    ) -> tuple[str, IncrementalState]:
        """Text that ``ids`` complete after ``state``; held back while it ends mid-character.

        Concatenating every returned text and a final ``flush_incremental`` equals
        ``decode`` of the whole stream.
        """
        state = IncrementalState() if state is None else state
        window = state.window + tuple(int(i) for i in ids)
        text = self.decode(window)
        if len(text) <= state.prefix_len or text.endswith(REPLACEMENT_CHAR):
            return "", IncrementalState(window, state.read, state.prefix_len)
        # The ids after the old prefix become the new prefix: the window stays a short tail.
        anchored = window[state.read :]
        return text[state.prefix_len :], IncrementalState(
            anchored, len(anchored), len(self.decode(anchored))
        )

    def flush_incremental(self, state: IncrementalState | None) -> str:
        """At the end of a stream: the text held back (it ends with ``"\\ufffd"``, or is "")."""
        if state is None:
            return ""
        return self.decode(state.window)[state.prefix_len :]

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """One string per id, ``"".join(pieces) == decode(ids)``, in one pass.

        A character split across ids is carried by the id that completes it; the ids before it
        get "". Text is handed out when ``decode_incremental`` would emit it (held back while
        it ends mid-character or with ``"\\ufffd"``), so the pieces are the stream's. Ids that
        ``decode`` drops (special tokens under ``skip_special_tokens``) get "".
        """
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        if not self._byte_level:
            return self._window_pieces(ids)
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces: list[str] = []
        held = ""
        for token_id in ids:
            raw = self._rendered_bytes(token_id)
            text = (held + utf8.decode(raw)) if raw else held
            pending = utf8.getstate()[0]  # bytes of a character not complete yet
            if pending or text.endswith(REPLACEMENT_CHAR):
                held, text = text, ""
            else:
                held = ""
            pieces.append(text)
        if pieces:
            pieces[-1] += held + utf8.decode(b"", final=True)
        return pieces

    def _rendered_bytes(self, token_id: int) -> bytes:
        """What ``token_id`` adds to a byte-level rendering: b"" when ``decode`` drops it."""
        entry = self._token_bytes.get(token_id)
        if entry is None:
            token = self._backend.id_to_token(token_id)
            if token is None:
                entry = (b"", False)
            else:
                entry = (byte_level_bytes(token), token in self._special_contents)
            self._token_bytes[token_id] = entry
        raw, special = entry
        return b"" if special and self.skip_special_tokens else raw

    def _window_pieces(self, ids: list[int]) -> list[str]:
        """Pieces from the ``decode_incremental`` stream, for decoders other than byte-level.

        For decoders whose window renderings are not prefix-stable (text clean-up rules), the
        pieces are re-cut along the same cumulative lengths so the join still equals
        ``decode(ids)``.
        """
        pieces: list[str] = []
        state = IncrementalState()
        for token_id in ids:
            piece, state = self.decode_incremental((token_id,), state)
            pieces.append(piece)
        if not pieces:
            return pieces
        pieces[-1] += self.flush_incremental(state)
        full = self.decode(ids)
        return pieces if "".join(pieces) == full else _recut(pieces, full)
