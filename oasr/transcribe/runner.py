"""``transcribe``: manifest rows -> windowed requests -> the engine -> stitched output rows.

Every row is decoded in chunks and cut into model windows as it is read
(``windows.stream_windows``); each window is one engine request, batched with the windows of
other rows. When a row's last window comes back its windows are stitched
(``oasr.engine.longform.stitch``) into one output row with times on the recording's clock.
A row that cannot be read becomes an error row and the run goes on; rows already in the output
are skipped, so a rerun resumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oasr.audio import AudioDecodeError, iter_audio_chunks
from oasr.engine.engine import ASREngine
from oasr.engine.longform import Window, WindowText, stitch
from oasr.engine.request import DecodingOptions, Request, RequestOutput
from oasr.io import ColumnMap, ManifestRow, OutputRow, OutputWriter, iter_manifest
from oasr.transcribe.windows import stream_windows

# Peak amplitude below which a window holds no signal (digital silence, dithering).
SILENCE_PEAK = 1e-4


@dataclass
class TranscribeOptions:
    """What one ``oasr transcribe`` run reads, decodes and writes."""

    inputs: list[str]
    columns: ColumnMap = field(default_factory=ColumnMap)
    shard: tuple[int, int] | None = None
    limit: int | None = None
    language: str | None = None
    task: str | None = None
    window_s: float | None = None  # default: the model's fixed window
    overlap_s: float = 5.0
    retry_errors: bool = False


@dataclass
class RunStats:
    rows: int = 0
    errors: int = 0
    skipped: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0
    refs: dict[str, str] = field(default_factory=dict)
    hyps: dict[str, str] = field(default_factory=dict)
    error_examples: list[str] = field(default_factory=list)

    @property
    def rtfx(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class _RowState:
    row: ManifestRow
    pieces: dict[int, tuple[Window, RequestOutput | None]] = field(default_factory=dict)
    expected: int | None = None  # known once the last window is cut
    duration: float = 0.0
    error: str | None = None
    finished: bool = False


def _error_row(row: ManifestRow, message: str, duration: float | None = None) -> OutputRow:
    return OutputRow(id=row.id, text=None, words=None, segments=None, confidence=None,
                     duration=duration, language=None, finish_reason=None, error=message,
                     passthrough=row.passthrough)


def _combine(state: _RowState) -> OutputRow:
    """Stitch a row's windows into its output row."""
    row = state.row
    ordered = [state.pieces[i] for i in sorted(state.pieces)]
    failed = [o.error for _, o in ordered if o is not None and o.error]
    if failed:
        return _error_row(row, f"{row.source}: {failed[0]}", state.duration)
    if all(o is None for _, o in ordered):
        return _error_row(
            row, f"{row.source}: the audio is silent (peak amplitude below {SILENCE_PEAK}); "
                 "check the recording or its offset/duration", state.duration)
    texts = [WindowText(w, o.text if o is not None else "") for w, o in ordered]
    stitched = stitch(texts)
    outs = [o for _, o in ordered if o is not None]
    tokens = sum(len(o.token_ids) for o in outs)
    confidence = (sum((o.confidence or 0.0) * len(o.token_ids) for o in outs) / tokens
                  if tokens else None)
    reasons = {o.finish_reason for o in outs}
    reason = next((r for r in ("repetition", "length", "stop") if r in reasons), None)
    languages = [o.language for o in outs if o.language]
    language = max(set(languages), key=languages.count) if languages else None
    segments = None
    if len(ordered) > 1:
        shift = row.offset
        segments = [{"start": s["start"] + shift, "end": s["end"] + shift, "text": s["text"]}
                    for s in stitched.segments]
    return OutputRow(id=row.id, text=stitched.text, words=None, segments=segments,
                     confidence=confidence, duration=state.duration, language=language,
                     finish_reason=reason, error=None, passthrough=row.passthrough)


class Transcriber:
    """Drives one engine over manifest rows and hands finished rows to a writer."""

    def __init__(self, engine: ASREngine, options: TranscribeOptions) -> None:
        self.engine = engine
        self.options = options
        window = engine.inputs.config.fixed_window_seconds
        self.window_s = options.window_s or window or 30.0
        self.states: dict[str, _RowState] = {}
        self.ready: list[tuple[OutputRow, str | None]] = []  # (row, reference text)

    def _decoding(self, row: ManifestRow) -> DecodingOptions:
        return DecodingOptions(language=row.language or self.options.language,
                               task=row.task or self.options.task)

    def _requests(self, rows: Iterator[ManifestRow]) -> Iterator[Request]:
        sr = self.engine.sample_rate
        for row in rows:
            if row.error:
                # Name the manifest line, as decode errors do, unless the reader already did.
                message = (row.error if row.error.startswith(row.source)
                           else f"{row.source}: {row.error}")
                self.ready.append((_error_row(row, message), row.text))
                continue
            state = _RowState(row)
            self.states[row.id] = state
            decoding = self._decoding(row)
            count = 0
            try:
                chunks = iter_audio_chunks(row.audio, sr, chunk_seconds=self.window_s,
                                           offset=row.offset, duration=row.duration)
                for window, audio in stream_windows(chunks, sr, self.window_s,
                                                    self.options.overlap_s):
                    count += 1
                    state.duration = window.end
                    if float(np.abs(audio).max(initial=0.0)) < SILENCE_PEAK:
                        state.pieces[window.index] = (window, None)
                        continue
                    yield Request(f"{row.id}\x1fw{window.index}", audio, decoding,
                                  metadata={"row": row.id, "window": window})
            except AudioDecodeError as exc:
                state.error = f"{row.source}: {exc}"
            if state.error is None and count == 0:
                state.error = f"{row.source}: the audio is empty (0 samples after decoding)"
            state.expected = count
            self._maybe_finish(state)

    def _maybe_finish(self, state: _RowState) -> None:
        if state.finished:
            return
        if state.error is not None:
            out = _error_row(state.row, state.error, state.duration or None)
        elif state.expected is not None and len(state.pieces) == state.expected:
            out = _combine(state)
        else:
            return
        state.finished = True
        del self.states[state.row.id]
        self.ready.append((out, state.row.text))

    def _accept(self, out: RequestOutput) -> None:
        row_id = out.metadata.get("row")
        state = self.states.get(row_id) if row_id is not None else None
        if state is None:
            return  # the row already ended as an error
        window: Window = out.metadata["window"]
        state.pieces[window.index] = (window, out)
        self._maybe_finish(state)

    def run(self, rows: Iterator[ManifestRow]) -> Iterator[tuple[OutputRow, str | None]]:
        """Yield (output row, reference text) as rows finish."""
        for out in self.engine.run(self._requests(rows)):
            if out.error and "row" not in out.metadata:
                continue
            self._accept(out)
            yield from self._drain()
        yield from self._drain()
        for state in list(self.states.values()):  # windows the engine never returned
            state.error = state.error or f"{state.row.source}: decoding did not finish"
            self._maybe_finish(state)
        yield from self._drain()

    def _drain(self) -> Iterator[tuple[OutputRow, str | None]]:
        ready, self.ready = self.ready, []
        yield from ready


def transcribe(engine: ASREngine, options: TranscribeOptions, writer: OutputWriter,
               on_row: Callable[[OutputRow, RunStats], Any] | None = None) -> RunStats:
    """Transcribe every row not already in ``writer``'s output; returns the run's figures."""
    stats = RunStats()
    done = writer.done_ids()
    rows = iter_manifest(options.inputs, options.columns, shard=options.shard,
                         limit=options.limit)

    def todo() -> Iterator[ManifestRow]:
        for row in rows:
            if row.id in done:
                stats.skipped += 1
                continue
            yield row

    start = time.perf_counter()
    try:
        for out, ref in Transcriber(engine, options).run(todo()):
            writer.write(out)
            stats.rows += 1
            stats.audio_s += out.duration or 0.0
            if out.error:
                stats.errors += 1
                if len(stats.error_examples) < 5:
                    stats.error_examples.append(f"{out.id}: {out.error}")
            elif ref is not None:
                stats.refs[out.id] = ref
                stats.hyps[out.id] = out.text or ""
            stats.wall_s = time.perf_counter() - start
            if on_row is not None:
                on_row(out, stats)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    stats.wall_s = time.perf_counter() - start
    return stats
