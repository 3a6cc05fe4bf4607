"""The Python API: ``oasr.load(name)`` -> a :class:`Model` whose ``transcribe`` takes a file.

    import oasr
    model = oasr.load("whisper-tiny.en", device="cpu")
    result = model.transcribe("talk.flac")
    print(result.text)
    for seg in result.segments: print(seg.start, seg.end, seg.text)

A recording of any length goes through the same long-form path as ``oasr transcribe``
(``oasr.transcribe.runner.Transcriber``: Whisper's window-after-window rule on the recording's
clock), so the API and the CLI give the same text for the same file. ``transcribe_batch``
batches many recordings through one engine and yields each :class:`Transcript` as it finishes.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.io.manifest import ManifestRow
from oasr.io.writer import OutputRow
from oasr.transcribe.fallback import TemperatureFallback
from oasr.transcribe.language_check import build_language_check
from oasr.transcribe.runner import TranscribeOptions, Transcriber

__all__ = ["Model", "Segment", "TranscriptionError", "Transcript", "Word", "load"]

AudioInput = str | Path | bytes | np.ndarray


class TranscriptionError(RuntimeError):
    """A recording could not be read or decoded; the message names it and why."""


@dataclass
class Word:
    word: str
    start: float  # seconds from the start of the recording
    end: float
    confidence: float


@dataclass
class Segment:
    start: float
    end: float
    text: str


@dataclass
class Transcript:
    """One recording's result. ``segments`` always tile the text (a recording shorter than the
    model's window is one segment); ``words`` is empty when word timings are off. ``index`` is
    the recording's position in the ``transcribe_batch`` input; ``error`` is None when fine."""

    text: str
    segments: list[Segment]
    words: list[Word]
    language: str | None
    duration: float
    confidence: float | None = None
    finish_reason: str | None = None
    source: str = ""
    index: int = 0
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def _to_source(audio: AudioInput, sample_rate: int | None) -> bytes | str:
    """A path or encoded bytes (what the audio readers take); an array is encoded to WAV."""
    if isinstance(audio, np.ndarray):
        if sample_rate is None:
            raise ValueError("an array of samples needs its sample_rate (e.g. sample_rate=16000)")
        import soundfile as sf

        data = np.asarray(audio, dtype=np.float32)
        if data.ndim == 2 and data.shape[0] < data.shape[1]:
            data = data.T  # (channels, n) -> (n, channels)
        buf = io.BytesIO()
        sf.write(buf, data, sample_rate, format="WAV", subtype="FLOAT")
        return buf.getvalue()
    if isinstance(audio, (bytes, bytearray, memoryview)):
        return bytes(audio)
    path = Path(audio).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no audio file {path}")
    return str(path.resolve())


def _label(audio: AudioInput, index: int) -> str:
    if isinstance(audio, (str, Path)):
        return str(audio)
    return f"<{type(audio).__name__} #{index}>"


def _transcript(out: OutputRow, index: int, source: str) -> Transcript:
    words = [Word(w["word"], w["start"], w["end"], w["confidence"]) for w in out.words or []]
    duration = out.duration or 0.0
    if out.segments is not None:
        segments = [Segment(s["start"], s["end"], s["text"]) for s in out.segments]
    elif out.text:
        segments = [Segment(0.0, duration, out.text)]
    else:
        segments = []
    return Transcript(text=out.text or "", segments=segments, words=words,
                      language=out.language, duration=duration, confidence=out.confidence,
                      finish_reason=out.finish_reason, source=source, index=index,
                      error=out.error, warnings=list(out.warnings))


class Model:
    """A loaded model and its engine; see :func:`load`."""

    def __init__(self, engine: ASREngine, word_timestamps: bool | None = None,
                 language_check: bool = True, segmenter: Any = None) -> None:
        self.engine = engine
        self.segmenter = segmenter  # a RecordingSegmenter when load(vad=...) named a detector
        if word_timestamps is None:
            word_timestamps = "offline" in engine.strategy.word_timing_modes
        self.word_timestamps = word_timestamps
        self._check = build_language_check(engine) if language_check else None

    @property
    def name(self) -> str:
        return self.engine.loaded.name

    def transcribe(self, audio: AudioInput, *, language: str | None = None,
                   task: str | None = None, prompt: str | None = None,
                   word_timestamps: bool | None = None, sample_rate: int | None = None,
                   temperature: float | Sequence[float] = 0.0, seed: int = 0,
                   condition_on_previous_text: bool | None = None) -> Transcript:
        """Transcribe one recording: a path, the encoded file's bytes, or an array of samples
        (mono ``(n,)`` or ``(n, channels)``, with ``sample_rate``). ``temperature``: one
        sampling temperature, or Whisper's fallback schedule (faster-whisper's is
        ``oasr.transcribe.fallback.FASTER_WHISPER_TEMPERATURES``), seeded by ``seed``.
        ``condition_on_previous_text``: prompt each window of a long recording with the text
        before it (None: on for a model that takes prompts, i.e. Whisper).

        Raises:
            TranscriptionError: the recording could not be read or decoded.
            ValueError: an option the model cannot honour (e.g. ``language="es"`` on an
                English-only model).
        """
        result = next(self.transcribe_batch([audio], language=language, task=task,
                                            prompt=prompt, word_timestamps=word_timestamps,
                                            sample_rate=sample_rate, temperature=temperature,
                                            seed=seed,
                                            condition_on_previous_text=condition_on_previous_text))
        if result.error:
            raise TranscriptionError(result.error)
        return result

    def transcribe_batch(self, audios: Iterable[AudioInput], *, language: str | None = None,
                         task: str | None = None, prompt: str | None = None,
                         word_timestamps: bool | None = None, sample_rate: int | None = None,
                         temperature: float | Sequence[float] = 0.0, seed: int = 0,
                         condition_on_previous_text: bool | None = None
                         ) -> Iterator[Transcript]:
        """Transcribe many recordings together, yielding each as it finishes (not in input
        order: ``Transcript.index`` is its position in ``audios``). A recording that cannot be
        read yields a Transcript with ``error`` set; the others go on."""
        from oasr.engine.request import DecodingOptions

        words = self.word_timestamps if word_timestamps is None else word_timestamps
        temps = ((float(temperature),) if isinstance(temperature, (int, float))
                 else tuple(float(t) for t in temperature))
        fallback = TemperatureFallback(temps, seed=seed)
        self.engine.strategy.validate_options(DecodingOptions(language=language, task=task,
                                                              word_timestamps=words))
        if max(temps) > 0:
            self.engine.strategy.validate_options(DecodingOptions(temperature=max(temps),
                                                                  seed=seed))
        labels: dict[str, tuple[int, str]] = {}

        def rows() -> Iterator[ManifestRow]:
            for i, audio in enumerate(audios):
                row_id, label = str(i), _label(audio, i)
                labels[row_id] = (i, label)
                try:
                    source: bytes | str | None = _to_source(audio, sample_rate)
                    error = None
                except OSError as exc:  # a missing file is that row's error; bad args raise
                    source, error = None, str(exc)
                yield ManifestRow(row_id, source, prompt=prompt, source=label, error=error)

        check = self._check if not language else None
        options = TranscribeOptions(inputs=[], language=language, task=task,
                                    word_timestamps=words, row_check=check,
                                    fallback=fallback,
                                    condition_on_previous_text=condition_on_previous_text)
        if self.segmenter is not None:
            from oasr.transcribe.vad_segments import VadTranscriber

            transcriber: Transcriber = VadTranscriber(self.engine, options, self.segmenter)
        else:
            transcriber = Transcriber(self.engine, options)
        for out, _ in transcriber.run(rows()):
            index, label = labels[out.id]
            yield _transcript(out, index, label)


def load(model: str | None = None, *, device: str = "auto", dtype: str = "auto",
         batch_size: int = 16, decode_method: str | None = None,
         decode_options: dict[str, Any] | None = None,
         word_timestamps: bool | None = None, threads: int | None = None,
         language_check: bool = True, vad: str = "none",
         vad_model_dir: str | None = None) -> Model:
    """Load ``model`` (a name from ``oasr models`` such as ``whisper-tiny.en`` or ``base``, a
    bundle or checkpoint folder, an installed model package or a Hub id; default: the packaged
    Whisper tiny.en) on ``device`` (auto, cpu, cuda, cuda:N).

    ``decode_options`` are the decode family's options (``beam_size``, ...), as
    ``--decode-option``; ``threads`` sets torch's CPU threads; ``word_timestamps`` None means
    on when the family can time words in this configuration. ``language_check``: on an
    English-only model, warn (``Transcript.warnings``) when a recording looks like another
    language (``oasr.transcribe.language_check``). ``vad``: a speech detector (``silero``,
    ``fsmn``; default ``none``), as ``oasr transcribe --vad``: long recordings cut at pauses and
    their chunks batched, recordings without speech returned empty (``finish_reason``
    ``no_speech``); its weights are found here (``vad_model_dir`` or the installed package),
    so a missing one raises now, naming the package to install.
    """
    if threads is not None:
        import torch

        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    config = EngineConfig(model=model or "", device=device, dtype=dtype,
                          decode_method=decode_method, decode_options=dict(decode_options or {}),
                          max_batch_size=batch_size)
    engine = ASREngine(config)
    segmenter = None
    if vad != "none":
        from oasr.transcribe.vad_segments import build_recording_segmenter

        try:
            segmenter = build_recording_segmenter(vad, device=str(engine.runner.device),
                                                  model_dir=vad_model_dir)
        except KeyError as exc:
            raise ValueError(f"vad={vad!r}: {exc}") from None
    return Model(engine, word_timestamps=word_timestamps, language_check=language_check,
                 segmenter=segmenter)
