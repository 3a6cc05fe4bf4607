"""The Python API, in faster-whisper's shape:

    import oasr
    model = oasr.load("whisper-tiny.en", device="cpu")
    segments, info = model.transcribe("talk.flac", beam_size=5, vad_filter=True)
    print(info.language, info.language_probability, info.duration)
    for seg in segments:  # decoded as it is read
        print(f"[{seg.start:.2f} -> {seg.end:.2f}] {seg.text}")

``model.transcript(path)`` is the eager form (one :class:`Transcript`: text, segments, words,
token ids), and ``model.transcribe_batch(paths)`` batches many recordings through one engine,
yielding a Transcript each, in input order. A recording of any length goes through the same
long-form path as ``oasr transcribe``, set up by the same
:class:`~oasr.transcribe.session.TranscriptionSession`, so the API and the CLI give the same
text for the same file and options.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from oasr.api.keywords import call_options
from oasr.api.results import (
    Segment,
    Transcript,
    TranscriptionError,
    TranscriptionInfo,
    Word,
    transcript_from_row,
    words_from_dicts,
)
from oasr.io.manifest import ManifestRow
from oasr.transcribe.options import RunOptions
from oasr.transcribe.session import Resolved, TranscriptionSession

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from oasr.transcribe.options import CallKeywords, RunKeywords

__all__ = ["Model", "Segment", "TranscriptionError", "TranscriptionInfo", "Transcript", "Word",
           "load"]

AudioInput = str | Path | bytes | np.ndarray


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


class Model:
    """A loaded model and its session; see :func:`load`."""

    def __init__(self, session: TranscriptionSession) -> None:
        self.session = session
        self.engine = session.engine
        self.segmenter = session.segmenter  # a RecordingSegmenter when load(vad=...) named one
        self.word_timestamps = session.word_timestamps

    @property
    def name(self) -> str:
        return self.engine.loaded.name

    def _resolve(self, prompt: str | None, options: dict[str, Any]) -> Resolved:
        return self.session.resolve(*call_options(self.session.options, prompt, options))

    def transcribe(self, audio: AudioInput, *, sample_rate: int | None = None,
                   prompt: str | None = None, **options: Any
                   ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """Transcribe one recording, as faster-whisper's ``WhisperModel.transcribe``:
        ``(segments, info)``, the segments a generator decoding the recording as it is read.

        ``audio``: a path, the encoded file's bytes, or an array of samples (mono ``(n,)`` or
        ``(n, channels)``, with ``sample_rate``). ``options``: the request options
        (``CallKeywords``: ``language``, ``task``, ``word_timestamps``, ``initial_prompt``
        (``prompt`` is the same), ``condition_on_previous_text``,
        ``prompt_reset_on_temperature``, ``max_new_tokens``, ``temperature`` (one value or the
        fallback schedule), ``compression_ratio_threshold``, ``log_prob_threshold``,
        ``no_speech_threshold``, ``seed``, ``language_check``, and the search options
        ``best_of``, ``patience``, ``length_penalty``, ``repetition_penalty``,
        ``no_repeat_ngram_size``, ``suppress_tokens``, ``suppress_blank``, ``prefix``,
        ``hotwords``, ``hotwords_score``), ``beam_size``, ``vad_filter`` and
        ``vad_parameters`` (faster-whisper's names); faster-whisper's other keywords raise
        naming why (``oasr.api.keywords.REFUSED``).

        Raises:
            TranscriptionError: the recording could not be read or decoded.
            ValueError: an option the model cannot honour (e.g. ``language="es"`` on an
                English-only model), or a faster-whisper option not served.
        """
        resolved = self._resolve(prompt, options)
        source = _to_source(audio, sample_rate)
        run = _SegmentReader(self.session, resolved, source, _label(audio, 0))
        return run.segments(), run.info()

    def transcript(self, audio: AudioInput, *, sample_rate: int | None = None,
                   prompt: str | None = None, **options: Unpack[CallKeywords]) -> Transcript:
        """The whole recording at once: a :class:`Transcript` (text, segments, words, token
        ids, confidence). Options and errors as :meth:`transcribe`."""
        result = next(self.transcribe_batch([audio], sample_rate=sample_rate, prompt=prompt,
                                            **options))
        if result.error:
            raise TranscriptionError(result.error)
        return result

    def transcribe_batch(self, audios: Iterable[AudioInput], *, sample_rate: int | None = None,
                         prompt: str | None = None, **options: Any) -> Iterator[Transcript]:
        """Transcribe many recordings together, yielding each :class:`Transcript` in input
        order (``Transcript.index`` is its position in ``audios``, which may be a generator,
        read lazily). A recording that cannot be read yields a Transcript with ``error`` set;
        the others go on. Options as :meth:`transcribe`."""
        resolved = self._resolve(prompt, options)
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

        options_ = self.session.transcribe_options(resolved=resolved)
        for out, _ in self.session.transcriber(options_, resolved).run(rows()):
            index, label = labels[out.id]
            yield transcript_from_row(out, index, label)


class _SegmentReader:
    """One recording decoded window by window as its segments are read. The first window is
    decoded before :meth:`info` returns (the language is known then, as in faster-whisper)."""

    def __init__(self, session: TranscriptionSession, resolved: Resolved, source: bytes | str,
                 label: str) -> None:
        self.resolved = resolved
        self.settled: deque[Any] = deque()
        options = session.transcribe_options(resolved=resolved)
        options.on_settled = self.settled.append
        self.transcriber = session.transcriber(options, resolved)
        self.row = ManifestRow("0", source, source=label)
        self.ticks = self.transcriber.run_ticks(iter([self.row]))
        self.out: Any = None  # the finished OutputRow
        self.windows = 0

    def _pull(self) -> bool:
        item = next(self.ticks, StopIteration)
        if item is StopIteration:
            return False
        if item is not None:
            self.out = item[0]
        return True

    def info(self) -> TranscriptionInfo:
        while not self.settled and self.out is None and self._pull():
            pass
        if self.out is not None and self.out.error:
            raise TranscriptionError(self.out.error)
        first = self.settled[0].output if self.settled else None
        from oasr.transcribe.runner import header_duration

        duration = header_duration(self.row)
        if duration is None:
            duration = self.out.duration if self.out is not None else 0.0
        speech = getattr(self.transcriber, "speech_seconds", {}).get(self.row.id)
        r = self.resolved
        return TranscriptionInfo(
            language=first.language if first is not None else getattr(self.out, "language",
                                                                       None),
            language_probability=getattr(first, "language_probability", None),
            all_language_probs=getattr(first, "all_language_probs", None),
            duration=duration, duration_after_vad=speech if speech is not None else duration,
            transcription_options={**r.decode.__dict__, **r.fallback_options.__dict__,
                                   "word_timestamps": r.word_timestamps,
                                   "condition_on_previous_text": r.condition_on_previous_text},
            vad_options=({"vad": r.vad.vad, **r.vad.segmenter_overrides()}
                         if r.segmenter is not None else None))

    def segments(self) -> Iterator[Segment]:
        from oasr.transcribe.fallback import compression_ratio

        n = 0
        while True:
            while self.settled:
                window = self.settled.popleft()
                self.windows += 1
                out = window.output
                for seg, words in _with_words(window.segments, window.words):
                    yield Segment(seg["start"], seg["end"], seg["text"], id=n, seek=window.start,
                                  words=words if self.resolved.word_timestamps else None,
                                  temperature=window.temperature, avg_logprob=out.avg_logprob,
                                  compression_ratio=compression_ratio(seg["text"]),
                                  no_speech_prob=out.no_speech_prob)
                    n += 1
            if self.out is not None:
                if self.out.error:
                    raise TranscriptionError(self.out.error)
                if not self.windows:  # the VAD-gated runner reports its chunks at the end
                    words = words_from_dicts(self.out.words)
                    for i, seg in enumerate(self.out.segments or []):
                        inside = [w for w in words if seg["start"] <= w.start < seg["end"]]
                        yield Segment(seg["start"], seg["end"], seg["text"], id=i,
                                      seek=seg["start"],
                                      words=inside if self.resolved.word_timestamps else None,
                                      compression_ratio=compression_ratio(seg["text"]))
                return
            if not self._pull():
                return


def _with_words(segments: list[dict[str, Any]], words: list[dict[str, Any]]
                ) -> Iterator[tuple[dict[str, Any], list[Word]]]:
    """Each segment with the window's words that start inside it (the last takes the rest)."""
    timed = words_from_dicts(words)
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        inside = [w for w in timed if w.start >= seg["start"] and (last or w.start < seg["end"])]
        timed = [w for w in timed if w not in inside]
        yield seg, inside


def load(model: str | None = None, *, options: RunOptions | None = None,
         **keywords: Unpack[RunKeywords]) -> Model:
    """Load ``model`` (a name from ``oasr models`` such as ``whisper-tiny.en`` or ``base``, a
    bundle or checkpoint folder, an installed model package or a Hub id; default: the packaged
    Whisper tiny.en).

    ``keywords`` are the run options ``oasr transcribe`` takes, under the same names
    (:class:`~oasr.transcribe.options.RunKeywords`): ``device`` (auto, cpu, cuda, cuda:N),
    ``dtype``, ``batch_size`` (None: from the device, as the CLI), ``threads``,
    ``quantization`` (int8, int8-weight, fp8, none) or faster-whisper's ``compute_type``
    (``int8``, ``int8_float16``, ``float16``...),
    ``decode_method``, ``decode_options`` (the family's, as ``--decode-option``; an unknown key
    raises naming the valid ones), ``beam_size``, ``word_timestamps`` (None: on when the family
    can time words), ``language_check``, ``vad`` (``silero``, ``fsmn``; default ``none``),
    ``vad_model_dir`` and the ``vad_*`` segmenter settings, and the request options
    :meth:`Model.transcribe` also takes per call. ``options``: a whole
    :class:`~oasr.transcribe.options.RunOptions`; keywords override it. The detector's weights
    are looked up here, so a missing one raises now, naming the package.
    """
    values = options.flat() if options is not None else {}
    values.update(keywords)
    if model:
        values["model"] = model
    return Model(TranscriptionSession(RunOptions.from_flat(**values)))
