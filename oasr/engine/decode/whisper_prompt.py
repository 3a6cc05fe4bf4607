"""Whisper's decoder input per request: the context before the SOT sequence, the SOT sequence,
the transcript's forced first tokens, and language detection.

A row decodes ``context + sot + forced`` (faster-whisper's ``get_prompt``):

- ``context``: ``<|startofprev|>``, then the hotwords text (only when there is no prefix),
  then the previous text (a text prompt encoded as ``" " + prompt.strip()``, or the token ids
  of previous windows). Hotwords keep their first tokens, the previous text its last, together
  at most ``limit`` (``max_prompt_tokens``) less the prefix; nothing at all is none.
- ``sot``: ``<|startoftranscript|>``, language, task and (outside timestamp mode)
  ``<|notimestamps|>``, substituted by token id (``WhisperConfig.prompt_ids``).
- ``forced``: in timestamp mode ``<|0.00|>``, then the prefix tokens (``" " + prefix.strip()``,
  its first ``limit``). They are the transcript's first tokens: a row starts with them as
  generated, so the output, the timestamp rules and the repetition rules all see them.

The context and the prefix share the prompt's KV reservation (``1 + limit`` positions; the
timestamp mode's ``<|0.00|>`` takes the slot ``<|notimestamps|>`` leaves), so a row's positions
never pass what admission reserved for it.

Language detection (a multilingual checkpoint, no language given): the decoder's logits after
``<|startoftranscript|>``, softmaxed over the language tokens (CTranslate2's
``detect_language``, what faster-whisper reports as ``language_probability`` and
``all_language_probs``); the most likely language is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["PromptParts", "WhisperPrompter", "LanguageGuess"]


@dataclass(frozen=True)
class PromptParts:
    context: tuple[int, ...]
    forced: tuple[int, ...]
    # Positions the context and the prefix take from the prompt reservation (``<|0.00|>``
    # excluded: it sits in the SOT sequence's last slot).
    reserved: int


@dataclass(frozen=True)
class LanguageGuess:
    code: str
    probability: float
    ranked: list[tuple[str, float]]  # every language of the checkpoint, most likely first


class WhisperPrompter:
    """Builds ``PromptParts`` (encodings cached for one admission: ``reset``)."""

    def __init__(self, cfg: Any, tokenizer: Any, limit: int) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.limit = limit
        self.sot_prev: int | None = getattr(tokenizer, "sot_prev", None)
        self._id_to_lang = {i: c for c, i in cfg.lang_to_id.items() if i < cfg.vocab_size}
        self._encoded: dict[str, list[int]] = {}

    def reset(self) -> None:
        self._encoded = {}

    def _encode(self, text: str) -> list[int]:
        ids = self._encoded.get(text)
        if ids is None:
            ids = list(self.tokenizer.encode(" " + text.strip()))
            self._encoded[text] = ids
        return ids

    @staticmethod
    def hotwords_text(hotwords: str | tuple[str, ...] | None) -> str | None:
        if hotwords is None:
            return None
        text = hotwords if isinstance(hotwords, str) else ", ".join(hotwords)
        return text if text.strip() else None

    def parts(self, decoding: Any) -> PromptParts:
        prefix = decoding.prefix if decoding.prefix and decoding.prefix.strip() else None
        prefix_ids = self._encode(prefix)[:self.limit] if prefix else []
        forced = list(prefix_ids)
        if prefix_ids and decoding.timestamps:
            forced.insert(0, self.cfg.timestamp_begin)
        room = self.limit - len(prefix_ids)
        hotwords = None if prefix else self.hotwords_text(decoding.hotwords)
        hot = self._encode(hotwords)[:room] if hotwords else []
        previous = decoding.prompt
        if isinstance(previous, list):  # token ids: a previous window's, as generated
            prev_ids = previous
        elif previous is not None and previous.strip():
            prev_ids = self._encode(previous)
        else:
            prev_ids = []
        keep = room - len(hot)
        prev_ids = prev_ids[len(prev_ids) - keep:] if keep > 0 else []
        context = [self.sot_prev, *hot, *prev_ids] if (hot or prev_ids) else []
        return PromptParts(tuple(context), tuple(forced), len(context) + len(prefix_ids))

    def sot(self, decoding: Any, language: str | None) -> list[int]:
        ids = self.cfg.prompt_ids(task=decoding.task,
                                  language=language if self.cfg.is_multilingual else None)
        if decoding.timestamps:
            ids = [t for t in ids if t != self.cfg.no_timestamps_token_id]
        return ids

    def detect(self, decoder: Any, enc: torch.Tensor) -> list[LanguageGuess]:
        """Per row of ``enc`` (B, T, C), the language from the decoder's first step after SOT
        (one host read for the batch)."""
        if not self.cfg.lang_to_id:
            raise ValueError("language detection needs a multilingual checkpoint")
        sot = torch.full((enc.shape[0], 1), self.cfg.decoder_start_token_id, device=enc.device)
        logits = decoder.forced_logits(enc, sot)[:, 0].float()
        ids = sorted(self._id_to_lang)
        lang_logits = logits.index_select(1, torch.tensor(ids, device=enc.device))
        best = lang_logits.argmax(-1).tolist()  # the logits decide (a tie: the lower id)
        probs = torch.softmax(lang_logits, dim=-1).tolist()
        codes = [self._id_to_lang[i] for i in ids]
        out = []
        for b, row in zip(best, probs):
            ranked = sorted(zip(codes, row), key=lambda cp: -cp[1])  # stable: ties by id
            out.append(LanguageGuess(codes[b], row[b], ranked))
        return out

    def languages(self, decoder: Any, requests: list[Any], enc: torch.Tensor
                  ) -> list[tuple[str | None, LanguageGuess | None]]:
        """Each row's language (as the checkpoint spells its codes) and, where it was
        detected, the guess."""
        if not self.cfg.is_multilingual:
            return [("en", None) for _ in requests]
        out: list[tuple[str | None, LanguageGuess | None]] = [
            (None if r.decoding.language is None else r.decoding.language.strip().lower(), None)
            for r in requests]
        todo = [i for i, (lang, _) in enumerate(out) if lang is None]
        if todo:
            idx = torch.tensor(todo, device=enc.device)
            for i, guess in zip(todo, self.detect(decoder, enc.index_select(0, idx))):
                out[i] = (guess.code, guess)
        return out
