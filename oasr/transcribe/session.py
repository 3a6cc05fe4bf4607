"""``TranscriptionSession``: a loaded engine with a run's options resolved once.

Every entry point sets a run up here and nowhere else: ``oasr transcribe`` (and each of its
``--gpus`` workers, which are plain ``oasr transcribe`` processes), ``oasr.load`` and the Ray
actors. The session

1. checks the options (:meth:`RunOptions.validate`) before anything loads;
2. loads the model into an :class:`~oasr.engine.engine.ASREngine` (batch size from the device
   unless given) and the speech detector the options name;
3. resolves what depends on the loaded model: word timings (on where the family can time
   words), previous-text conditioning (on where the model takes prompts), and refuses here a
   run-wide option the model cannot honour (a language an English-only model lacks, a prompt
   for a family without prompts, sampling for a family without it);
4. hands out runners (:meth:`transcriber`) over manifest rows, and the metadata an output
   records of the run.

A caller that changes per-request options for one call (the API's ``transcribe(language=...)``)
asks for :meth:`resolve` with the changed groups: the same checks, the same defaults.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from oasr.transcribe.options import (
    DecodeOptions,
    FallbackOptions,
    OptionsError,
    RunOptions,
    VadOptions,
)

__all__ = ["COMPARED_SETTINGS", "Resolved", "TranscriptionSession", "build_engine",
           "changed_settings"]

# The metadata keys a resumed run compares with the run that started the output.
COMPARED_SETTINGS = ("model_sha256", "decode_method", "decode_options", "language", "task",
                     "word_timestamps", "vad", "vad_options", "initial_prompt",
                     "condition_on_previous_text", "search_options", "quantization")


@dataclass(frozen=True)
class Resolved:
    """Per-request options as a run applies them, after the model has had its say."""

    decode: DecodeOptions
    word_timestamps: bool
    condition_on_previous_text: bool
    fallback: Any  # oasr.transcribe.fallback.TemperatureFallback
    engine: Any  # the engine whose decode family these options name (weights shared)
    segmenter: Any  # the speech detector's RecordingSegmenter, or None
    vad: VadOptions
    fallback_options: FallbackOptions
    coverage: Any = None  # oasr.transcribe.coverage.CoverageCheck, or None


class TranscriptionSession:
    """A model loaded for ``options`` (module docstring). Raises ``ValueError`` (an option,
    checked or refused by the model), ``KeyError`` (an unknown name) or
    ``FileNotFoundError`` (a model or detector that is not there), each naming the fix."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options.validate()
        self.engine = build_engine(options)
        self._engines: dict[str, Any] = {self._family_key(options.decode): self.engine}
        self._segmenters: dict[str, Any] = {}
        self.defaults = self.resolve(options.decode, options.fallback, options.vad)
        self.segmenter = self.defaults.segmenter
        self._language_check: Any = None

    @staticmethod
    def _family_key(decode: DecodeOptions) -> str:
        return json.dumps([decode.decode_method, decode.family_options()], sort_keys=True,
                          default=str)

    def engine_for(self, decode: DecodeOptions) -> Any:
        """The engine for ``decode``'s family and family options: the session's own, or one
        built once over the same loaded weights (a call asking for another ``beam_size``)."""
        key = self._family_key(decode)
        if key not in self._engines:
            from oasr.engine.engine import ASREngine

            base = self.engine.config
            config = dataclasses.replace(base, decode_method=decode.decode_method,
                                         decode_options=decode.family_options())
            self._engines[key] = ASREngine(config, loaded=self.engine.loaded)
        return self._engines[key]

    def segmenter_for(self, vad: VadOptions) -> Any:
        """The speech detector and segmenter ``vad`` names (built once per setting), or None."""
        if vad.vad == "none":
            return None
        key = json.dumps([vad.vad, vad.vad_model_dir, vad.segmenter_overrides()],
                         sort_keys=True)
        if key not in self._segmenters:
            from oasr.transcribe.recording_segmenter import build_recording_segmenter

            try:
                self._segmenters[key] = build_recording_segmenter(
                    vad.vad, device=str(self.engine.runner.device),
                    model_dir=vad.vad_model_dir, overrides=vad.segmenter_overrides())
            except (ValueError, KeyError) as exc:
                text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                raise ValueError(f"--vad {vad.vad}: {text}") from None
        return self._segmenters[key]

    # -- per-request options ------------------------------------------------------------------
    def resolve(self, decode: DecodeOptions, fallback: FallbackOptions,
                vad: VadOptions | None = None) -> Resolved:
        """``decode``, ``fallback`` and ``vad`` (default: the session's) as this model applies
        them; raises ValueError for an option it cannot honour."""
        from oasr.engine.request import DecodingOptions
        from oasr.transcribe.runner import resolve_conditioning

        decode.validate()
        fallback.validate()
        vad = vad or self.options.vad
        vad.validate()
        engine = self.engine_for(decode)
        strategy = engine.strategy
        words = decode.word_timestamps
        if words is None:
            words = "offline" in strategy.word_timing_modes
        strategy.validate_options(DecodingOptions(language=decode.language, task=decode.task,
                                                  word_timestamps=words))
        if decode.initial_prompt is not None:
            strategy.validate_options(DecodingOptions(prompt=decode.initial_prompt))
        condition = resolve_conditioning(engine, decode.condition_on_previous_text)
        if max(fallback.temperature) > 0:
            strategy.validate_options(DecodingOptions(temperature=max(fallback.temperature),
                                                      seed=fallback.seed))
        _check_search(strategy, decode, max(fallback.temperature))
        segmenter = self.segmenter_for(vad)
        return Resolved(decode, words, condition, fallback.build(), engine, segmenter, vad,
                        fallback, self.coverage_for(vad, segmenter) if words else None)

    def coverage_for(self, vad: VadOptions, segmenter: Any) -> Any:
        """The coverage check ``vad`` names (built once per setting), or None."""
        key = json.dumps(["coverage", vad.coverage_vad, vad.vad, vad.vad_model_dir,
                          vad.segmenter_overrides()], sort_keys=True)
        if key not in self._segmenters:
            from oasr.transcribe.coverage import CoverageCheck, build_coverage_detector

            # On the engine's device (oasr.transcribe.speech_ahead: on the CPU a thread of
            # its own beside the engine, on a GPU batched on the engine's thread); the run's
            # --vad segmenter, when there is one, is the one the run built.
            detector = build_coverage_detector(vad.coverage_vad, segmenter, vad.vad,
                                               device=str(self.engine.runner.device))
            self._segmenters[key] = CoverageCheck(detector) if detector is not None else None
        return self._segmenters[key]

    @property
    def word_timestamps(self) -> bool:
        return self.defaults.word_timestamps

    def language_check(self, resolved: Resolved) -> Any:
        """The English-only model's language check for rows of ``resolved`` (None when off or
        when the run names its language)."""
        if not resolved.decode.language_check or resolved.decode.language:
            return None
        if self._language_check is None:
            from oasr.transcribe.language_check import build_language_check

            self._language_check = build_language_check(self.engine) or False
        return self._language_check or None

    # -- runners --------------------------------------------------------------------------------
    def transcribe_options(self, inputs: list[str] | None = None, *, columns: Any = None,
                           shard: tuple[int, int] | None = None, limit: int | None = None,
                           resolved: Resolved | None = None) -> Any:
        """The runner's options for rows read from ``inputs`` (a manifest plan), under
        ``resolved`` (default: the session's own)."""
        from oasr.io import ColumnMap
        from oasr.transcribe.runner import TranscribeOptions

        r = resolved or self.defaults
        # A manifest column named like one --emit adds passes through as input_<name>.
        columns = dataclasses.replace(columns or ColumnMap(),
                                      emit=tuple(self.options.output.emit))
        return TranscribeOptions(
            inputs=list(inputs or []), columns=columns, shard=shard, limit=limit,
            language=r.decode.language, task=r.decode.task, word_timestamps=r.word_timestamps,
            row_check=self.language_check(r), fallback=r.fallback,
            initial_prompt=r.decode.initial_prompt,
            condition_on_previous_text=r.condition_on_previous_text,
            prompt_reset_on_temperature=r.decode.prompt_reset_on_temperature,
            max_new_tokens=r.decode.max_new_tokens, coverage=r.coverage,
            search=r.decode.search_options())

    def transcriber(self, options: Any, resolved: Resolved | None = None) -> Any:
        """A runner over ``options`` (:meth:`transcribe_options`) on ``resolved``'s engine
        (default: the session's): the VAD-gated one when a speech detector is named."""
        r = resolved or self.defaults
        if r.segmenter is not None:
            from oasr.transcribe.vad_segments import VadTranscriber

            return VadTranscriber(r.engine, options, r.segmenter)
        from oasr.transcribe.runner import Transcriber

        return Transcriber(r.engine, options)

    def metadata(self, transcriber: Any) -> dict[str, str]:
        """What an output records of the run that wrote it: the resolved settings (the decode
        family's full options with defaults filled in, not the raw ``-d`` strings)."""
        from oasr import __version__

        engine, options = self.engine, transcriber.options
        family = engine.strategy.options
        resolved = (dataclasses.asdict(family) if dataclasses.is_dataclass(family)
                    else dict(engine.config.decode_options))
        return {
            "oasr_version": __version__,
            "model": engine.loaded.name or "default",
            "model_sha256": engine.loaded.weights_sha256,
            "decode_method": engine.decode_method,
            # "int8 (absmax)" or "none": a resumed run may not mix quantized and float rows.
            "quantization": (f"{engine.quantization.spec.method} "
                             f"({engine.quantization.spec.algorithm})"
                             if engine.quantization is not None else "none"),
            "decode_options": json.dumps(resolved, sort_keys=True, default=str),
            "language": options.language or "",
            "task": options.task or "",
            "word_timestamps": str(bool(options.word_timestamps)).lower(),
            "initial_prompt": options.initial_prompt or "",
            "condition_on_previous_text": str(bool(options.condition_on_previous_text)).lower(),
            "window_s": f"{transcriber.window_s:g}",
            "vad": self.options.vad.vad,
            "vad_options": json.dumps(self.options.vad.segmenter_overrides(), sort_keys=True),
            "coverage_vad": options.coverage.name if options.coverage is not None else "none",
            "search_options": json.dumps(options.search, sort_keys=True),
        }


def _check_search(strategy: Any, decode: DecodeOptions, temperature: float) -> None:
    """Each search option ``decode`` sets off its default, asked of the decode family alone
    (with the hotwords its score boosts, at the run's hottest temperature): a family that
    cannot serve one is refused naming that option."""
    from oasr.engine.request import DecodingOptions

    defaults = DecodeOptions()
    for name, value in decode.search_options().items():
        if value == getattr(defaults, name):
            continue
        asked = {name: value, "temperature": temperature}
        if name == "hotwords_score":
            asked["hotwords"] = decode.hotwords
        try:
            strategy.validate_options(DecodingOptions(**asked))
        except ValueError as exc:
            raise OptionsError(name, f": {exc}") from None


def build_engine(options: RunOptions) -> Any:
    """The engine ``options`` name (model, device, dtype and quantization, batch size from the
    device unless given, torch's threads, the decode family and its options): how every entry point,
    ``oasr stream`` included, loads a model."""
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.runtime_threads import configure_threads

    model = options.model
    model.check_device()
    device = EngineConfig(device=model.device).resolve_device()
    # torch's pool from the process's CPU budget (affinity, cgroup quota), not the host.
    configure_threads(model.threads, "cuda" if device.startswith("cuda") else "cpu")
    batch_size = model.batch_size
    if batch_size is None:
        from oasr.transcribe.batch_size import default_batch_size

        batch_size = default_batch_size(device)
    quantization, dtype = model.quantization_and_dtype()
    return ASREngine(EngineConfig(
        model=model.model, device=model.device, dtype=dtype, quantization=quantization,
        decode_method=options.decode.decode_method,
        decode_options=options.decode.family_options(), max_batch_size=batch_size))


def changed_settings(previous: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """``key: before -> now`` for each compared setting an earlier run recorded otherwise."""
    if not previous:
        return []
    changed = []
    for key in COMPARED_SETTINGS:
        before = previous.get(key)
        if before is not None and before != current.get(key):
            if key == "model_sha256":
                changed.append(f"model {previous.get('model')} -> {current.get('model')}")
            else:
                changed.append(f"{key} {before or '(unset)'} -> {current.get(key) or '(unset)'}")
    return changed
