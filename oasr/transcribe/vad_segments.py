"""``oasr transcribe --vad NAME``: recordings pre-segmented by a speech detector.

Per row, the detector reads the whole recording and the shared segmenter turns its
probabilities into speech segments (``PRESEGMENT``: split at pauses of at least 160 ms, padded by
up to 400 ms, none longer than the chunk limit) and unpadded speech (what coverage is measured
against). Then:

- a row with no speech is not decoded: empty text, ``finish_reason="no_speech"``;
- a row no longer than the model's window, with speech, is decoded whole, as without a VAD;
- a longer row is cut into chunks (:mod:`oasr.transcribe.vad_chunks`): consecutive segments
  merged while a chunk spans at most ``CHUNK_S`` (and the window) less the overlap read at a
  join inside speech, every chunk of the recording sent to the engine at once, so the chunks of
  one recording batch together. Chunks are decoded in timestamp mode where the family has it
  (``CHUNK_TIMESTAMPS``; its segments then cut the phrases), each with the initial prompt
  only. The audio between chunks (silence by the detector's judgement) is never decoded.

Every chunk's words are then checked against the detected speech (``options.coverage``): a
stretch no word covers is decoded again on its own (:mod:`oasr.transcribe.repair`), and the
row's text, phrase segments and words are assembled from the chunks and repairs in time order
(:mod:`oasr.transcribe.segments`).

Rows are read and detected in groups (``DETECT_BATCH`` rows, at most ``DETECT_BATCH_S`` seconds
of audio), one padded detector call a group. Each recording is held whole in memory (16 kHz
float32: 230 MB an hour), unlike the VAD-less runner's forward-only windows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from oasr.audio import AudioDecodeError, iter_audio_chunks
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request, RequestOutput
from oasr.io import ManifestRow, OutputRow
from oasr.transcribe.generation_limits import generation_cap
from oasr.transcribe.recording_segmenter import (
    PRESEGMENT,
    RecordingSegmenter,
    VadRecording,
    build_recording_segmenter,
)
from oasr.transcribe.repair import RowCoverage
from oasr.transcribe.rows import assemble_row, error_row, no_speech_row
from oasr.transcribe.runner import TranscribeOptions, Transcriber, window_options
from oasr.transcribe.segments import Piece, assemble, trim_piece
from oasr.transcribe.skip_guard import cut_before, first_skip
from oasr.transcribe.vad_chunks import JOIN_OVERLAP_S, Chunk, merge_into_chunks, plan_chunks

# Rows whose audio is read and run through the detector together.
DETECT_BATCH = 16
DETECT_BATCH_S = 1800.0
# Rows whose detected speech seconds are kept (the API's info.duration_after_vad reads them).
SPEECH_SECONDS_KEPT = 1024
# The longest chunk decoded (with the overlap at joins; at most the model's window).
CHUNK_S = 30.0
# Chunks decode in Whisper's timestamp mode where the family has it: without timestamps
# tiny.en ends some 25-30 s chunks after a sentence or two (docs/decoding.md, "Long recordings").
CHUNK_TIMESTAMPS = True

__all__ = ["CHUNK_S", "PRESEGMENT", "RecordingSegmenter", "VadRecording", "VadTranscriber",
           "build_recording_segmenter", "merge_into_chunks"]


@dataclass
class _VadRow:
    row: ManifestRow
    decoding: DecodingOptions
    duration_s: float
    chunks: list[Chunk]  # seconds on the row's clock
    long: bool
    audio: np.ndarray  # held for the repairs
    coverage: RowCoverage | None = None
    outs: dict[int, RequestOutput] = field(default_factory=dict)
    pieces: list[Piece] = field(default_factory=list)


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
        # Chunks span at most CHUNK_S (and the window), less the overlap read at joins.
        overlap = 2 * JOIN_OVERLAP_S if options.word_timestamps else 0.0
        self.chunk_limit_s = min(CHUNK_S, self.window_s) - overlap

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
                recs = self.segmenter.batch(audios, self.sr, self.chunk_limit_s)
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
        decoding = replace(window_options(self.options, row), prompt=prompt,
                           max_new_tokens=self.options.max_new_tokens)
        long = len(audio) > self.window
        if not rec.segments:
            words = bool(decoding.word_timestamps)
            out = no_speech_row(row, rec.duration_s, words, long)
            if self.options.coverage is not None and words:
                out.coverage = 1.0  # no speech detected: none left out
            self.ready.append((out, row.text))
            return
        chunks = (plan_chunks(rec.segments, rec.speech, self.chunk_limit_s, rec.duration_s,
                              bool(decoding.word_timestamps)) if long
                  else [Chunk(0.0, rec.duration_s)])
        state = _VadRow(row, decoding, rec.duration_s, chunks, long, audio,
                        self._row_coverage())
        if state.coverage is not None:
            state.coverage.settle([(row.offset + a, row.offset + b) for a, b in rec.speech],
                                  -math.inf, math.inf)
        self.vad_rows[row.id] = state
        self.active[row.id] = state  # counts toward max_active
        for i, chunk in enumerate(chunks):
            piece = audio[int(round(chunk.start * self.sr)):int(round(chunk.end * self.sr))]
            # A request refused at admission comes back from the engine as an error output.
            # The prefix opens the recording: its first chunk only, as faster-whisper.
            self._queue.append(Request(f"{row.id}\x1fv{i}", piece, replace(
                decoding, timestamps=long and self.resumes and CHUNK_TIMESTAMPS,
                max_new_tokens=decoding.max_new_tokens or generation_cap(len(piece) / self.sr),
                prefix=self.options.search.get("prefix") if i == 0 else None),
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
        if "repair" in out.metadata:
            assert state.coverage is not None
            job = state.coverage.pending[out.metadata["repair"]]
            result = state.coverage.outcome(job, out, self.options.fallback)
            if result is True:
                self._submit_repair(state, job)
                return
            if isinstance(result, Piece):
                state.pieces.append(result)
        else:
            state.outs[int(out.metadata["window"])] = out
            if len(state.outs) < len(state.chunks):
                return
            self._chunks_done(state)
        if state.coverage is None or not state.coverage.pending:
            self._finish_vad(state)

    def _chunks_done(self, state: _VadRow) -> None:
        """Every chunk is back: their pieces, and the repairs of the speech they left out."""
        shift = state.row.offset
        timed = bool(state.decoding.word_timestamps)
        for i, chunk in enumerate(state.chunks):
            out = state.outs[i]
            skip = first_skip(out) if timed else None
            if skip is not None:  # what the decoder skipped is left to the coverage repair
                out = cut_before(out, skip, resume=False)
            start, end = shift + chunk.start, shift + chunk.end
            words = [{"word": w.word, "start": round(start + w.start, 3),
                      "end": round(min(start + w.end, end), 3), "confidence": w.confidence}
                     for w in out.words or []]
            model = None
            if out.segments is not None:  # timestamp mode: the settled segments only
                model = [{"start": start + a, "end": end if b is None else min(start + b, end),
                          "text": text} for a, b, text in out.segments]
            piece = Piece(start, end, out.text, words if timed else None, model, source=out,
                          kind="chunk")
            state.pieces.append(trim_piece(piece, shift + chunk.keep_from,
                                           shift + chunk.keep_to))
        coverage = state.coverage
        if coverage is None:
            return
        heard = [w for p in state.pieces for w in p.words or []]
        for job in coverage.all_jobs(coverage.speech, heard, state.audio, shift, 0):
            self._submit_repair(state, job)

    def _finish_vad(self, state: _VadRow) -> None:
        self.vad_rows.pop(state.row.id)
        self.active.pop(state.row.id, None)
        pieces = sorted(state.pieces, key=lambda p: p.start)
        coverage = state.coverage
        text, segments, words = assemble(
            pieces, speech=coverage.speech if coverage is not None else None,
            settled_to=coverage.settled_to if coverage is not None else 0.0)
        outs = [state.outs[i] for i in range(len(state.chunks))]
        out = assemble_row(state.row, outs, duration=state.duration_s, texts=[text],
                           segments=segments, words=words)
        if coverage is not None and words is not None:
            out.coverage = coverage.figure(words)
            warning = coverage.warning(words)
            if warning:
                out.warnings.append(warning)
            self.repairs += coverage.repaired
            self.coverage_warnings += coverage.warned
        if self.options.row_check is not None:
            self.options.row_check(state.row, out)
        self.ready.append((out, state.row.text))
