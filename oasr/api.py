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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from oasr.io.manifest import ManifestRow
from oasr.io.writer import OutputRow
from oasr.transcribe.options import CALL_OPTIONS, CallKeywords, RunKeywords, RunOptions
from oasr.transcribe.session import TranscriptionSession

if TYPE_CHECKING:
    from typing_extensions import Unpack

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
    token_ids: list[int] = field(default_factory=list)  # the decoded tokens, every family


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
                      error=out.error, warnings=list(out.warnings),
                      token_ids=list(out.token_ids or []))


class Model:
    """A loaded model and its engine; see :func:`load`."""

    def __init__(self, session: TranscriptionSession) -> None:
        self.session = session
        self.engine = session.engine
        self.segmenter = session.segmenter  # a RecordingSegmenter when load(vad=...) named one
        self.word_timestamps = session.word_timestamps

    @property
    def name(self) -> str:
        return self.engine.loaded.name

    def transcribe(self, audio: AudioInput, *, sample_rate: int | None = None,
                   prompt: str | None = None, **options: Unpack[CallKeywords]) -> Transcript:
        """Transcribe one recording: a path, the encoded file's bytes, or an array of samples
        (mono ``(n,)`` or ``(n, channels)``, with ``sample_rate``).

        ``options`` override the model's request options for this call (``CallKeywords``:
        ``language``, ``task``, ``word_timestamps``, ``initial_prompt`` (``prompt`` is the same),
        ``condition_on_previous_text``, ``max_new_tokens``, ``temperature`` (one value or
        Whisper's fallback schedule, e.g. ``oasr.transcribe.fallback.FASTER_WHISPER_TEMPERATURES``)
        with ``compression_ratio_threshold``, ``log_prob_threshold``, ``no_speech_threshold``
        and ``seed``), checked as ``oasr transcribe`` checks its flags.

        Raises:
            TranscriptionError: the recording could not be read or decoded.
            ValueError: an option the model cannot honour (e.g. ``language="es"`` on an
                English-only model).
        """
        result = next(self.transcribe_batch([audio], sample_rate=sample_rate, prompt=prompt,
                                            **options))
        if result.error:
            raise TranscriptionError(result.error)
        return result

    def transcribe_batch(self, audios: Iterable[AudioInput], *, sample_rate: int | None = None,
                         prompt: str | None = None, **options: Unpack[CallKeywords]
                         ) -> Iterator[Transcript]:
        """Transcribe many recordings together, yielding each as it finishes, in input order
        (``Transcript.index`` is its position in ``audios``). A recording that cannot be read
        yields a Transcript with ``error`` set; the others go on. Options as
        :meth:`transcribe`."""
        resolved = self.session.resolve(*self._call_options(prompt, options))
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
                yield ManifestRow(row_id, source, source=label, error=error)

        transcriber = self.session.transcriber(self.session.transcribe_options(resolved=resolved))
        for out, _ in transcriber.run(rows()):
            index, label = labels[out.id]
            yield _transcript(out, index, label)

    def _call_options(self, prompt: str | None, options: dict[str, Any]) -> tuple[Any, Any]:
        """The session's decode and fallback groups with this call's ``options`` applied."""
        unknown = sorted(set(options) - set(CALL_OPTIONS))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)} for transcribe(); valid: "
                            f"{', '.join(CALL_OPTIONS)}")
        if prompt is not None:
            if options.get("initial_prompt") is not None:
                raise TypeError("give prompt or initial_prompt, not both (they are the same)")
            options = {**options, "initial_prompt": prompt}
        base = self.session.options
        call = RunOptions.from_flat(**{**base.decode.__dict__, **base.fallback.__dict__,
                                       **options})
        return call.decode, call.fallback


def load(model: str | None = None, *, options: RunOptions | None = None,
         **keywords: Unpack[RunKeywords]) -> Model:
    """Load ``model`` (a name from ``oasr models`` such as ``whisper-tiny.en`` or ``base``, a
    bundle or checkpoint folder, an installed model package or a Hub id; default: the packaged
    Whisper tiny.en).

    ``keywords`` are the run options ``oasr transcribe`` takes, under the same names
    (:class:`~oasr.transcribe.options.RunKeywords`): ``device`` (auto, cpu, cuda, cuda:N),
    ``dtype``, ``batch_size`` (None: from the device, as the CLI), ``threads``,
    ``decode_method``, ``decode_options`` (the family's, as ``--decode-option``; an unknown key
    raises naming the valid ones), ``beam_size``, ``word_timestamps`` (None: on when the family
    can time words), ``language_check``, ``vad`` (``silero``, ``fsmn``; default ``none``) and
    ``vad_model_dir``, and the request options :meth:`Model.transcribe` also takes per call.
    ``options``: a whole :class:`~oasr.transcribe.options.RunOptions`; keywords override it.
    The detector's weights are looked up here, so a missing one raises now, naming the package.
    """
    values = options.flat() if options is not None else {}
    values.update(keywords)
    if model:
        values["model"] = model
    return Model(TranscriptionSession(RunOptions.from_flat(**values)))
