"""``oasr transcribe --vad NAME``: recordings pre-segmented by a speech detector.

Per row, the detector reads the whole recording and the shared segmenter turns its
probabilities into speech segments (``PRESEGMENT``: split at pauses of at least 160 ms, padded by
up to 400 ms, none longer than the model's window). Then:

- a row with no speech is not decoded: empty text, ``finish_reason="no_speech"``;
- a row no longer than the model's window, with speech, is decoded whole, as without a VAD;
- a longer row is cut into chunks: consecutive segments are merged while the span from the
  chunk's first start to its last end fits the window (as faster-whisper's batched pipeline and
  WhisperX do), and every chunk of the recording goes to the engine at once, so the chunks of
  one recording batch together. Chunks are decoded without timestamps; each becomes one entry
  of ``segments``, its word times shifted onto the recording's clock. The audio between chunks
  (silence by the detector's judgement) is never decoded.

Rows are read and detected in groups (``DETECT_BATCH`` rows, at most ``DETECT_BATCH_S`` seconds
of audio), one padded detector call a group. Each recording is held whole in memory (16 kHz
float32: 230 MB an hour), unlike the VAD-less runner's forward-only windows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from oasr.audio import AudioDecodeError, iter_audio_chunks
from oasr.audio.resample import resample
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request, RequestOutput
from oasr.io import ManifestRow, OutputRow
from oasr.transcribe.rows import assemble_row, error_row, no_speech_row
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from oasr.vad import VADS, SpeechDetector, build_detector
from oasr.vad.segmenter import SegmenterConfig, segment

# Rows whose audio is read and run through the detector together.
DETECT_BATCH = 16
DETECT_BATCH_S = 1800.0
# Rows whose detected speech seconds are kept (the API's info.duration_after_vad reads them).
SPEECH_SECONDS_KEPT = 1024
PRESEGMENT = SegmenterConfig(min_speech_ms=250.0, min_silence_ms=160.0, speech_pad_ms=400.0)


def merge_into_chunks(segments: list[tuple[float, float]],
                      window_s: float) -> list[tuple[float, float]]:
    """Merge consecutive ``(start, end)`` segments while a chunk spans at most ``window_s``."""
    chunks: list[tuple[float, float]] = []
    for start, end in segments:
        if chunks and end - chunks[-1][0] <= window_s:
            chunks[-1] = (chunks[-1][0], end)
        else:
            chunks.append((start, end))
    return chunks


@dataclass
class VadRecording:
    """One recording's speech segments (seconds from the row's start) and its duration."""

    segments: list[tuple[float, float]]
    duration_s: float


class RecordingSegmenter:
    """A presegmenting detector plus the segmenter's policy, run over whole recordings."""

    def __init__(self, detector: SpeechDetector, name: str,
                 config: SegmenterConfig | None = None) -> None:
        self.detector = detector
        self.spec = VADS.get(name)
        if "presegment" not in self.spec.modes:
            raise ValueError(f"speech detector {name!r} cannot pre-segment audio")
        self.config = config or replace(PRESEGMENT, threshold=detector.default_threshold)
        framing = self.spec.framing
        self.rates = framing.sample_rates if framing is not None else (16000,)

    def __call__(self, audio: np.ndarray, sample_rate: int,
                 max_segment_s: float) -> VadRecording:
        return self.batch([audio], sample_rate, max_segment_s)[0]

    def batch(self, audios: list[np.ndarray], sample_rate: int,
              max_segment_s: float) -> list[VadRecording]:
        """Several recordings through one padded detector call, segmented each."""
        rate = sample_rate if sample_rate in self.rates else max(self.rates)
        wavs = [a if rate == sample_rate else resample(a, sample_rate, rate) for a in audios]
        lengths = torch.tensor([len(w) for w in wavs])
        x = torch.zeros(len(wavs), int(lengths.max()))
        for i, w in enumerate(wavs):
            x[i, : len(w)] = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
        out = self.detector.detect(x, lengths, rate)
        config = replace(self.config, max_segment_s=min(self.config.max_segment_s,
                                                         max_segment_s))
        recs = []
        for i, audio in enumerate(audios):
            duration = len(audio) / sample_rate
            segs = segment(out.row(i).numpy(), out.frame_s, duration, config,
                           self.spec.min_silence_floor_ms)
            recs.append(VadRecording(segs, duration))
        return recs


def build_recording_segmenter(name: str, device: str = "cpu", model_dir: str | None = None,
                              overrides: dict[str, float] | None = None) -> RecordingSegmenter:
    """``--vad NAME``: raises naming the fix when the detector cannot pre-segment or has no
    weights, before any row is read. ``overrides``: ``SegmenterConfig`` fields set over
    :data:`PRESEGMENT` and the detector's own threshold (``--vad-threshold`` ...)."""
    detector = build_detector(name, mode="presegment", model_dir=model_dir, device=device)
    config = replace(PRESEGMENT, threshold=detector.default_threshold)
    return RecordingSegmenter(detector, name, replace(config, **(overrides or {})))


@dataclass
class _VadRow:
    row: ManifestRow
    decoding: DecodingOptions
    duration_s: float
    chunks: list[tuple[float, float]]  # seconds on the row's clock
    long: bool
    outs: dict[int, RequestOutput] = field(default_factory=dict)


class VadTranscriber(Transcriber):
    """A ``Transcriber`` whose rows are gated and cut by a speech detector (module docstring)."""

    prefetch_audio = False  # each group's audio is read whole for the detector, in _detected

    def __init__(self, engine: ASREngine, options: TranscribeOptions,
                 segmenter: RecordingSegmenter, max_active: int | None = None) -> None:
        super().__init__(engine, options, max_active)
        self.segmenter = segmenter
        self.vad_rows: dict[str, _VadRow] = {}
        # row id -> its audio and detection, or the message of why it could not be read
        self.prepared: dict[str, Any] = {}
        self.vad_s = 0.0  # seconds spent in the detector and the segmenter
        # row id -> seconds the detector called speech, for the latest rows only
        self.speech_seconds: dict[str, float] = {}

    def run_ticks(self, rows: Iterator[ManifestRow]
                  ) -> Iterator[tuple[OutputRow, str | None] | None]:
        yield from super().run_ticks(self._detected(iter(rows)))

    def _detected(self, rows: Iterator[ManifestRow]) -> Iterator[ManifestRow]:
        """The rows, each group's audio read and run through the detector in one batch first
        (up to ``DETECT_BATCH`` rows or ``DETECT_BATCH_S`` seconds of audio a group)."""
        while True:
            group: list[ManifestRow] = []
            audios: list[np.ndarray] = []
            seconds = 0.0
            while len(group) < DETECT_BATCH and seconds < DETECT_BATCH_S:
                row = next(rows, None)
                if row is None:
                    break
                group.append(row)
                if row.error:
                    continue
                try:
                    pieces = list(iter_audio_chunks(row.audio, self.sr, chunk_seconds=60.0,
                                                    offset=row.offset, duration=row.duration))
                except AudioDecodeError as exc:
                    self.prepared[row.id] = row.located(str(exc))
                    continue
                audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
                if not len(audio):
                    self.prepared[row.id] = (f"{row.source}: the audio is empty (0 samples "
                                             "after decoding)")
                    continue
                audios.append(audio)
                seconds += len(audio) / self.sr
                self.prepared[row.id] = audio
            if not group:
                return
            if audios:
                t0 = time.perf_counter()
                recs = self.segmenter.batch(audios, self.sr, self.window / self.sr)
                self.vad_s += time.perf_counter() - t0
                by_audio = iter(recs)
                for row in group:
                    if isinstance(self.prepared.get(row.id), np.ndarray):
                        rec = next(by_audio)
                        self.prepared[row.id] = (self.prepared[row.id], rec)
                        self.speech_seconds[row.id] = sum(e - s for s, e in rec.segments)
                        while len(self.speech_seconds) > SPEECH_SECONDS_KEPT:
                            self.speech_seconds.pop(next(iter(self.speech_seconds)))
            yield from group

    def _start(self, row: ManifestRow) -> None:
        if row.error:
            super()._start(row)
            return
        prepared = self.prepared.pop(row.id)
        if isinstance(prepared, str):
            self.ready.append((error_row(row, prepared), row.text))
            return
        audio, rec = prepared
        # Chunks decode in parallel: each takes the initial prompt (faster-whisper's batched
        # pipeline does the same), never the text of another chunk.
        prompt = row.prompt if row.prompt is not None else self.options.initial_prompt
        decoding = DecodingOptions(language=row.language or self.options.language,
                                   task=row.task or self.options.task, prompt=prompt,
                                   word_timestamps=self.options.word_timestamps,
                                   max_new_tokens=self.options.max_new_tokens)
        if not rec.segments:
            words = bool(decoding.word_timestamps)
            self.ready.append((no_speech_row(row, rec.duration_s, words, len(audio) > self.window),
                               row.text))
            return
        long = len(audio) > self.window
        chunks = (merge_into_chunks(rec.segments, self.window / self.sr) if long
                  else [(0.0, rec.duration_s)])
        state = _VadRow(row, decoding, rec.duration_s, chunks, long)
        self.vad_rows[row.id] = state
        self.active[row.id] = state  # type: ignore[assignment]  # counts toward max_active
        for i, (start, end) in enumerate(chunks):
            piece = audio[int(round(start * self.sr)):int(round(end * self.sr))]
            # A request refused at admission comes back from the engine as an error output.
            self._queue.append(Request(f"{row.id}\x1fv{i}", piece, decoding,
                                       metadata={"row": row.id, "window": i}))

    def _fail_vad(self, state: _VadRow, message: str) -> None:
        self.vad_rows.pop(state.row.id, None)
        self.active.pop(state.row.id, None)
        self.ready.append((error_row(state.row, message, state.duration_s), state.row.text))

    def _fail(self, state: Any, message: str) -> None:
        if isinstance(state, _VadRow):
            self._fail_vad(state, message)
        else:
            super()._fail(state, message)

    def _accept(self, out: RequestOutput) -> None:
        state = self.vad_rows.get(out.metadata.get("row"))
        if state is None:
            return
        if out.error:
            self._fail_vad(state, state.row.located(out.error))
            return
        state.outs[int(out.metadata["window"])] = out
        if len(state.outs) == len(state.chunks):
            self.vad_rows.pop(state.row.id)
            self.active.pop(state.row.id, None)
            self.ready.append((_stitched_row(state), state.row.text))


def _stitched_row(state: _VadRow) -> OutputRow:
    shift = state.row.offset
    outs = [state.outs[i] for i in range(len(state.chunks))]
    segments: list[dict[str, Any]] = []
    words: list[dict[str, Any]] = []
    for (start, end), out in zip(state.chunks, outs):
        if out.text:
            segments.append({"start": shift + start, "end": shift + end, "text": out.text})
        words += [{"word": w.word, "start": shift + start + w.start,
                   "end": shift + min(start + w.end, end), "confidence": w.confidence}
                  for w in out.words or []]
    texts = [o.text for o in outs] if state.long else [outs[0].text]
    return assemble_row(state.row, outs, duration=state.duration_s, texts=texts,
                        segments=segments if state.long else None,
                        words=words if state.decoding.word_timestamps else None)
