"""The ``whisper`` tokenizer kind: Whisper's byte-level BPE with its special and timestamp tokens.

Whisper's vocabulary is text tokens, then ``<|endoftext|>``, ``<|startoftranscript|>``, one token
per language, the task tokens, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>`` (named
``<|nocaptions|>`` before large-v3), ``<|notimestamps|>``, and 1501 timestamp tokens
``<|0.00|>`` ... ``<|30.00|>`` in 0.02 s steps. Every id is read from the vocabulary except the
timestamps': CTranslate2's ``tokenizer.json`` files stop before them, so timestamp ids are
``<|notimestamps|> + 1 + i`` by arithmetic and, when the file does carry them, checked against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer as Backend

from oasr.tokenizers.huggingface import HuggingFaceTokenizer

__all__ = [
    "LANGUAGE_CODES",
    "NUM_TIMESTAMPS",
    "TASKS",
    "TIME_PRECISION",
    "WhisperTokenizer",
]

# Whisper's language codes in vocabulary order; "yue" exists only in large-v3's vocabulary.
LANGUAGE_CODES: tuple[str, ...] = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr",
    "pl", "ca", "nl", "ar", "sv", "it", "id", "hi", "fi", "vi",
    "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
    "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk",
    "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk",
    "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
    "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc",
    "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo",
    "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
)  # fmt: skip

# Older English-only vocabularies spell Hebrew's token with its withdrawn ISO code.
_TOKEN_SPELLINGS: dict[str, tuple[str, ...]] = {"he": ("he", "iw")}

TASKS = ("transcribe", "translate")
TIME_PRECISION = 0.02
NUM_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
# openai-whisper's rule: a model is multilingual when its output vocabulary (timestamps
# included) has at least 51865 entries; the English-only models have 51864.
_MULTILINGUAL_MIN_VOCAB = 51865


def _timestamp_text(index: int) -> str:
    # index * 2 / 100 is the correctly rounded decimal, so "%.2f" never drifts.
    return f"<|{index * 2 / 100:.2f}|>"


class WhisperTokenizer(HuggingFaceTokenizer):
    """Whisper's tokenizer: ``decode`` drops special and timestamp tokens unless told otherwise.

    Attributes (token ids): ``eot``, ``sot``, ``translate``, ``transcribe``, ``sot_lm``,
    ``sot_prev``, ``no_speech``, ``no_timestamps``, ``timestamp_begin`` (``<|0.00|>``).
    """

    kind = "whisper"

    def __init__(self, backend: Backend, **options: Any) -> None:
        super().__init__(backend, **options)
        self.eot = self._require("<|endoftext|>")
        self.sot = self._require("<|startoftranscript|>")
        self.translate = self._require("<|translate|>")
        self.transcribe = self._require("<|transcribe|>")
        self.sot_lm = self._require("<|startoflm|>")
        self.sot_prev = self._require("<|startofprev|>")
        self.no_speech = self._require("<|nospeech|>", "<|nocaptions|>")
        self.no_timestamps = self._require("<|notimestamps|>")
        self.timestamp_begin = self.no_timestamps + 1
        self._check_timestamps_in_vocabulary()
        self._vocab_size = max(
            backend.get_vocab_size(with_added_tokens=True),
            self.timestamp_begin + NUM_TIMESTAMPS,
        )
        found = {c: self._language_lookup(c) for c in LANGUAGE_CODES}
        self._language_ids: dict[str, int] = {
            code: found[code]
            for code in sorted((c for c in found if found[c] is not None), key=found.__getitem__)
        }

    def _require(self, *names: str) -> int:
        for name in names:
            token_id = self.token_to_id(name)
            if token_id is not None:
                return token_id
        raise ValueError(f"not a Whisper vocabulary: it has no {' or '.join(names)} token")

    def _language_lookup(self, code: str) -> int | None:
        for spelling in _TOKEN_SPELLINGS.get(code, (code,)):
            token_id = self.token_to_id(f"<|{spelling}|>")
            if token_id is not None:
                return token_id
        return None

    def _check_timestamps_in_vocabulary(self) -> None:
        for index in (0, NUM_TIMESTAMPS - 1):
            token_id = self.token_to_id(_timestamp_text(index))
            if token_id is not None and token_id != self.timestamp_begin + index:
                raise ValueError(
                    f"timestamp token {_timestamp_text(index)} has id {token_id}; Whisper's "
                    f"layout puts it at <|notimestamps|> + 1 + {index} = "
                    f"{self.timestamp_begin + index}"
                )

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """The model's output size: the backend's vocabulary and the timestamp tokens."""
        return self._vocab_size

    @property
    def is_multilingual(self) -> bool:
        return self._vocab_size >= _MULTILINGUAL_MIN_VOCAB

    @property
    def languages(self) -> tuple[str, ...]:
        """The language codes this vocabulary has tokens for, in id order."""
        return tuple(self._language_ids)

    @property
    def language_ids(self) -> dict[str, int]:
        """Language code -> token id (a copy)."""
        return dict(self._language_ids)

    def language_token(self, code: str) -> int:
        token_id = self._language_ids.get(code)
        if token_id is None:
            raise ValueError(
                f"unknown Whisper language code {code!r}; this vocabulary has: "
                f"{', '.join(self._language_ids)}"
            )
        return token_id

    def task_token(self, task: str) -> int:
        if task not in TASKS:
            raise ValueError(f"unknown Whisper task {task!r}; valid tasks: {TASKS}")
        return self.transcribe if task == "transcribe" else self.translate

    def sot_sequence(
        self,
        language: str | None = None,
        task: str | None = None,
        *,
        no_timestamps: bool = False,
    ) -> list[int]:
        """The decoder prompt: ``<|startoftranscript|>`` [language] [task] [``<|notimestamps|>``].

        ``language=None`` leaves the language token out (the model predicts it). English-only
        models take no language or task token: "en" and "transcribe" are accepted and left out,
        anything else raises.
        """
        sequence = [self.sot]
        if self.is_multilingual:
            if language is not None:
                sequence.append(self.language_token(language))
            if task is not None:
                sequence.append(self.task_token(task))
        else:
            if language not in (None, "en"):
                raise ValueError(
                    f"language {language!r} asked of an English-only Whisper vocabulary"
                )
            if task is not None and self.task_token(task) != self.transcribe:
                raise ValueError(f"task {task!r} asked of an English-only Whisper vocabulary")
        if no_timestamps:
            sequence.append(self.no_timestamps)
        return sequence

    # -- timestamps -----------------------------------------------------------------------
    def is_timestamp(self, token_id: int) -> bool:
        return self.timestamp_begin <= token_id < self.timestamp_begin + NUM_TIMESTAMPS

    def timestamp_seconds(self, token_id: int) -> float:
        if not self.is_timestamp(token_id):
            raise ValueError(f"token id {token_id} is not a timestamp token")
        return (token_id - self.timestamp_begin) * 2 / 100

    def timestamp_id(self, seconds: float) -> int:
        """The timestamp token nearest ``seconds`` (0 to 30 s)."""
        index = round(seconds / TIME_PRECISION)
        if not 0 <= index < NUM_TIMESTAMPS:
            raise ValueError(f"{seconds} s is outside Whisper's timestamp range [0, 30]")
        return self.timestamp_begin + index

    # -- ids -> text ----------------------------------------------------------------------
    def decode(self, ids: Sequence[int], skip_special_tokens: bool | None = None) -> str:
        """Text of ``ids``; timestamps always dropped, special tokens unless told otherwise."""
        text_ids = [int(i) for i in ids if not self.is_timestamp(int(i))]
        return super().decode(text_ids, skip_special_tokens)

    def _rendered_bytes(self, token_id: int) -> bytes:
        # ``decode`` drops timestamps before rendering: bytes on either side of one still join.
        return b"" if self.is_timestamp(token_id) else super()._rendered_bytes(token_id)

    def decode_with_timestamps(
        self, ids: Sequence[int], skip_special_tokens: bool | None = None
    ) -> str:
        """Text with each timestamp token rendered in place, e.g. ``"<|0.00|> Hi<|1.08|>"``."""
        parts: list[str] = []
        run: list[int] = []
        for token_id in ids:
            token_id = int(token_id)
            if self.is_timestamp(token_id):
                parts.append(self.decode(run, skip_special_tokens))
                parts.append(_timestamp_text(token_id - self.timestamp_begin))
                run = []
            else:
                run.append(token_id)
        parts.append(self.decode(run, skip_special_tokens))
        return "".join(parts)
