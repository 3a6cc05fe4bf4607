"""``transcribe``: manifest rows -> model windows -> the engine -> output rows.

Every row is decoded in chunks and read forward one model window at a time
(``audio_window.ForwardAudio``); each window is one engine request, batched with the windows of
other rows. A recording longer than the window is decoded window after window in timestamp
mode, its segments on the recording's clock. A row that cannot be read becomes an error row and
the run goes on; rows already in the output are skipped, so a rerun resumes. A window of
digital silence is not decoded, and a window Whisper's no-speech guard calls silent
(``fallback.TemperatureFallback.silent``) keeps no text; a recording that is silent throughout
gets empty text with ``finish_reason="no_speech"`` (:mod:`oasr.transcribe.rows`). Whisper's
prompt (``initial_prompt``, a row's ``prompt`` column) goes before the first window;
``condition_on_previous_text`` prompts each later window with the tokens settled before it,
which the sequential windows of a recording allow. Each window's generation is capped by its
length (:mod:`oasr.transcribe.generation_limits`). With ``options.coverage`` each window's
speech is checked against its words and what no word covers is decoded again
(:mod:`oasr.transcribe.recording`, :mod:`oasr.transcribe.repair`); a row's segments are phrases
of its words (:mod:`oasr.transcribe.segments`), the windows being bookkeeping.

Requests reach the engine through its one admission loop, :meth:`ASREngine.run`: the
transcriber is its request source, yielding the next window of any row in flight, or starting a
new row, and ``None`` ("nothing now") while every open row waits on a window being decoded.
A model without a fixed window (CTC) is read in ``DEFAULT_WINDOW_S`` windows unless
``window_s`` says otherwise; the window used is :attr:`Transcriber.window_s`.

Memory is bounded by the rows in flight (``max_active``), not by the rows of the run: finished
rows go to the writer as they finish, and the run's figures are counters (WER included).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from oasr import ops
from oasr.audio import AudioDecodeError, iter_audio_chunks
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request, RequestOutput
from oasr.io import ColumnMap, ManifestRow, OutputRow, OutputWriter, iter_manifest
from oasr.transcribe.audio_window import ForwardAudio, quiet_cut, resume_before_onset
from oasr.transcribe.coverage import CoverageCheck
from oasr.transcribe.fallback import TemperatureFallback
from oasr.transcribe.family_traits import (
    repairs_uncovered_speech,
    resolve_conditioning,
    resumes_from_timestamps,
    takes_prompts,
)
from oasr.transcribe.generation_limits import generation_cap, is_repetition
from oasr.transcribe.output_thread import OutputThread
from oasr.transcribe.prefetch import AudioPrefetch, default_workers
from oasr.transcribe.recording import (
    RowState,
    SettledWindow,
    WindowGroup,
    cover_window,
    release_groups,
    summary_row,
)
from oasr.transcribe.repair import RepairJob, RowCoverage
from oasr.transcribe.rows import error_row
from oasr.transcribe.run_stats import RunStats
from oasr.transcribe.segments import Piece
from oasr.transcribe.skip_guard import cut_before, first_skip
from oasr.transcribe.speech_ahead import SpeechAhead, SpeechBatched, speech_runner

__all__ = ["DEFAULT_WINDOW_S", "RunStats", "SettledWindow", "TranscribeOptions", "Transcriber",
           "header_duration", "resolve_conditioning", "resumes_from_timestamps", "takes_prompts",
           "transcribe"]

# Peak amplitude below which a window holds no signal (digital silence, dithering).
SILENCE_PEAK = 1e-4
# Previous-window token ids kept for the next window's prompt (Whisper reads its last 223).
CONTEXT_TOKENS = 1024
# The window of a model that declares none (CTC reads any length; this bounds memory per row).
DEFAULT_WINDOW_S = 30.0
# A window whose first segment skipped speech is decoded again over this part of the window.
NARROWED_WINDOW = 0.5


@dataclass
class TranscribeOptions:
    """What one ``oasr transcribe`` run reads, decodes and writes."""

    inputs: list[str]
    columns: ColumnMap = field(default_factory=ColumnMap)
    shard: tuple[int, int] | None = None
    limit: int | None = None
    language: str | None = None
    task: str | None = None
    window_s: float | None = None  # default: the model's fixed window, else DEFAULT_WINDOW_S
    word_timestamps: bool = False
    # Called on each finished row (e.g. language_check.LanguageCheck); may add out.warnings.
    row_check: Callable[[ManifestRow, OutputRow], Any] | None = None
    # Whisper's temperature fallback (oasr.transcribe.fallback); None: one decode per window.
    fallback: TemperatureFallback | None = None
    # Called after each settled window of a long recording with (row id, seconds settled,
    # the recording's duration or None), so progress moves within a recording.
    on_window: Callable[[str, float, float | None], Any] | None = None
    # Whisper's prompt: the text before the first window of every row without a ``prompt``
    # column (a row's column wins). With ``condition_on_previous_text`` each later window of a
    # long recording is prompted with the tokens settled since the last reset (a window kept at
    # a temperature above ``prompt_reset_on_temperature`` resets it, as in faster-whisper, and
    # so does a kept window that repeats itself. None: on for a model that takes a prompt
    # (Whisper), off for the others; True on a model without prompts raises.
    initial_prompt: str | None = None
    condition_on_previous_text: bool | None = None
    prompt_reset_on_temperature: float = 0.5
    # Tokens a window may generate; None: scaled with the window's audio (generation_cap).
    max_new_tokens: int | None = None
    # ``DecodingOptions`` fields every window takes (``DecodeOptions.search_options``: best_of,
    # patience, ..., hotwords), but ``prefix``: a recording's first decoded window only.
    search: dict[str, Any] = field(default_factory=dict)
    # Called with each kept window of the sequential runner as it settles (SettledWindow), in
    # the recording's order, before the row finishes: what a lazy segment reader follows.
    on_settled: Callable[[Any], Any] | None = None
    # Threads decoding audio ahead of the engine (oasr.transcribe.prefetch); None: one per
    # core but one (at most 8); 0: decode on the transcriber's thread.
    decode_workers: int | None = None
    # Write rows and score their WER on a thread of their own (oasr.transcribe.output_thread).
    output_thread: bool = True
    # Speech checked against the words (oasr.transcribe.coverage): each row's ``coverage``,
    # uncovered stretches decoded again; None: not measured (needs word_timestamps).
    coverage: CoverageCheck | None = None


def header_duration(row: ManifestRow) -> float | None:
    """The recording's (or its segment's) duration from the file header, for progress."""
    from oasr.audio import audio_info

    if row.duration is not None:
        return row.duration
    try:
        return max(audio_info(row.audio).duration - row.offset, 0.0)
    except (AudioDecodeError, OSError, ValueError):
        return None


class Transcriber:
    """Drives one engine over manifest rows and yields finished output rows.

    A recording longer than the model's window is decoded in consecutive windows, Whisper's
    own long-form rule: each window runs in timestamp mode, settles the segments that closed in
    it, and the next window starts at the last closed timestamp, so an utterance the window
    cut is decoded whole by the next one and nothing is decoded twice. Windows of one
    recording are sequential; windows of different recordings batch together (up to
    ``max_active`` recordings in flight).

    With ``options.coverage`` each window's speech is checked against its words
    (:mod:`oasr.transcribe.coverage`): the next window never starts past speech the window
    left without words after its last word (it starts there instead, at least
    ``MIN_RESUME_ADVANCE_S`` on), and a stretch inside the window is decoded again on its own
    (:mod:`oasr.transcribe.repair`) beside the next window; a window is reported once its
    repairs are back.

    Audio is decoded ahead on a thread pool (:mod:`oasr.transcribe.prefetch`) unless
    ``options.decode_workers`` is 0; what reaches the engine is the same either way.
    """

    # Whether rows are decoded ahead by the pool (a subclass reading its audio itself: False).
    prefetch_audio = True

    def __init__(self, engine: ASREngine, options: TranscribeOptions,
                 max_active: int | None = None,
                 on_output: Callable[[], Any] | None = None) -> None:
        self.engine = engine
        self.on_output = on_output  # called after every engine output (e.g. a timed flush)
        self.options = options
        self.sr = engine.sample_rate
        self.window_s = (options.window_s or engine.inputs.config.fixed_window_seconds
                         or DEFAULT_WINDOW_S)
        self.window = int(round(self.window_s * self.sr))
        self.max_active = max_active or 4 * engine.config.max_batch_size
        # A family that honours Whisper's timestamp mode in this configuration resumes a
        # recording from its last closed segment; the others (CTC, beam search) take
        # consecutive windows cut at a quiet frame.
        self.resumes = resumes_from_timestamps(engine)
        self.repairs_speech = repairs_uncovered_speech(engine)
        self.condition = resolve_conditioning(engine, options.condition_on_previous_text)
        self.active: dict[str, Any] = {}
        self.ready: list[tuple[OutputRow, str | None]] = []
        # Rows leave in input order: ids in the order they started, and finished rows that
        # wait on an earlier one. Bounded, since no row starts while ``max_active`` wait.
        self._started: deque[str] = deque()
        self._held: dict[str, list[tuple[OutputRow, str | None]]] = {}
        self._queue: deque[Request] = deque()  # windows to hand the engine
        self._rows: Iterator[ManifestRow] = iter(())
        self._rows_done = False
        self._prefetch: AudioPrefetch | None = None
        # Where the coverage detector runs (oasr.transcribe.speech_ahead): on its own thread
        # while the engine decodes, or batched on this one over every block waiting.
        self._speech_ahead: SpeechAhead | SpeechBatched | None = None
        self.coverage_warnings = 0  # rows left with speech no word covers
        self.repairs = 0  # stretches of speech decoded again and kept

    @property
    def prefetch_depth(self) -> int:
        """Rows opened (decoding) ahead of the rows in flight: two admissions' worth, what a
        finishing batch frees, and no more than ``max_active``, so the rows held stay bounded
        by the rows in flight."""
        if not self.prefetch_audio:
            return 0
        return min(2 * self.engine.config.max_batch_size, self.max_active)

    def _row_coverage(self) -> RowCoverage | None:
        check = self.options.coverage
        if check is None or not self.options.word_timestamps:
            return None
        if check.repair and not self.repairs_speech:
            check = replace(check, repair=False)
        return RowCoverage(check, self.sr, self.window_s, ahead=self._speech_ahead)

    # -- rows -----------------------------------------------------------------------------
    def _start(self, row: ManifestRow) -> None:
        if row.error:
            # Name the manifest line, as decode errors do, unless the reader already did.
            message = row.located(row.error)
            self.ready.append((error_row(row, message), row.text))
            return
        chunks = self._prefetch.take(row) if self._prefetch is not None else None
        if chunks is None:
            chunks = self._open_chunks(row)
        decoding = window_options(self.options, row)
        state = RowState(row, ForwardAudio(chunks), decoding, coverage=self._row_coverage(),
                         prefix=self.options.search.get("prefix"))
        initial = row.prompt if row.prompt is not None else self.options.initial_prompt
        if initial and initial.strip():
            state.prompt_text = initial
        if self.condition:
            state.prompt_ids = (self._encode(" " + initial.strip()) if state.prompt_text
                                else [])
            state.prompt_text = None
        self.active[row.id] = state
        self._next_window(state, 0)

    def _encode(self, text: str) -> list[int]:
        return list(self.engine.tokenizer.encode(text))

    def _open_chunks(self, row: ManifestRow) -> Iterator[np.ndarray]:
        return iter_audio_chunks(row.audio, self.sr, chunk_seconds=self.window / self.sr,
                                 offset=row.offset, duration=row.duration)

    def _fail(self, state: RowState, message: str) -> None:
        self.active.pop(state.row.id, None)
        duration = state.reader.total / self.sr if state.reader.total else None
        self.ready.append((error_row(state.row, message, duration), state.row.text))

    def _finish(self, state: RowState) -> None:
        """The row is read to its end: it finishes once its repairs are back."""
        state.read_all = True
        release_groups(state, self.options.on_settled)  # the group held for the next one
        if state.groups:
            return
        self.active.pop(state.row.id, None)
        out = summary_row(state, state.reader.total / self.sr)
        if state.coverage is not None:
            self.repairs += state.coverage.repaired
            self.coverage_warnings += state.coverage.warned
        if self.options.row_check is not None:
            self.options.row_check(state.row, out)
        self.ready.append((out, state.row.text))

    def _next_window(self, state: RowState, seek: int) -> None:
        """Submit the window starting at ``seek`` (``state.narrowed`` samples long when set),
        or finish the row when the audio ends."""
        row = state.row
        while True:
            try:
                if state.coverage is not None:  # the blocks of this window and the next
                    state.coverage.detect_ahead(seek + 2 * self.window, state.reader.peek)
                audio = state.reader.window(seek, state.narrowed or self.window)
                more = state.reader.has_more(seek + len(audio))
            except AudioDecodeError as exc:
                self._fail(state, row.located(str(exc)))
                return
            if not len(audio):
                if seek == 0:
                    self._fail(state, f"{row.source}: the audio is empty (0 samples after "
                                      "decoding)")
                else:
                    self._finish(state)
                return
            if seek == 0:
                state.long = more
                if more and self.options.on_window is not None:
                    state.expected_s = header_duration(row)
            if more and not self.resumes:
                audio = audio[:quiet_cut(audio, self.sr)]
            state.seek, state.window_len = seek, len(audio)
            if peak(audio) >= SILENCE_PEAK:
                break
            if not more:  # a silent tail settles the row
                self._finish(state)
                return
            seek += len(audio)
        decoding = replace(state.decoding, timestamps=state.long and self.resumes,
                           max_new_tokens=(self.options.max_new_tokens
                                           or generation_cap(len(audio) / self.sr)),
                           prompt=state.prompt_ids or state.prompt_text, prefix=state.prefix)
        fallback = self.options.fallback
        if fallback is not None:
            temperature = fallback.temperatures[state.attempt]
            decoding = replace(decoding, temperature=temperature,
                               seed=fallback.window_seed(row.id, state.index, state.attempt)
                               if temperature > 0 else None)
        self._queue.append(Request(f"{row.id}\x1fw{state.index}", audio, decoding,
                                   metadata={"row": row.id, "window": state.index}))
        state.index += 1

    def _accept(self, out: RequestOutput) -> None:
        state = self.active.get(out.metadata.get("row"))
        if state is None:
            return
        if out.error:
            self._fail(state, state.row.located(out.error))
            return
        if "repair" in out.metadata:
            self._accept_repair(state, out)
            return
        fallback = self.options.fallback
        if fallback is not None and fallback.retry(out, state.attempt):
            state.attempt += 1
            state.retries += 1
            self._next_window(state, state.seek)  # the same window, one temperature up
            return
        if state.long and self.resumes and state.decoding.word_timestamps:
            skip = first_skip(out)
            first = skip is not None and skip.segment == 0
            if first and state.narrowed is None:
                # The first segment is a skip: the same start over a shorter window, which
                # gives the decoder another context.
                state.narrowed = int(self.window * NARROWED_WINDOW)
                self._next_window(state, state.seek)
                return
            if skip is not None:
                # Again from the start: nothing of it is kept and the whole shorter window is
                # settled, its speech left to the coverage repair.
                out = cut_before(out, skip, resume=not first)
        state.narrowed = None
        temperature = fallback.temperatures[state.attempt] if fallback is not None else 0.0
        state.attempt = 0
        shift = state.row.offset
        state.prefix = None  # a window was decoded: the prefix served the recording's start
        start = state.seek / self.sr
        window_end = (state.seek + state.window_len) / self.sr
        # No speech (Whisper's no-speech guard): nothing is kept, the window is passed.
        silent = fallback is not None and fallback.silent(out)
        words: list[dict[str, Any]] = []
        advance = state.window_len
        piece = None
        if not silent:
            self._keep(state, out, temperature)
            # Word times on the recording's clock; a window's words are its settled text's.
            # Rounded to milliseconds: the sums would otherwise print as 4.5200000000000005.
            words = [{"word": w.word, "start": round(shift + start + w.start, 3),
                      "end": round(shift + min(start + w.end, window_end), 3),
                      "confidence": w.confidence} for w in out.words or []]
            model = None
            if state.long and self.resumes:
                model = [{"start": shift + start + a,
                          "end": shift + (window_end if b is None else min(start + b,
                                                                            window_end)),
                          "text": text} for a, b, text in out.segments or []]
                if out.resume_at is not None:
                    advance = int(out.resume_at * self.sr)
                    if out.words:
                        audio = state.reader.window(state.seek, state.window_len)
                        advance = int(resume_before_onset(
                            audio, self.sr, advance / self.sr, out.words[-1].end) * self.sr)
            piece = Piece(shift + start, shift + start + advance / self.sr, out.text,
                          words if state.decoding.word_timestamps else None, model,
                          temperature=temperature, source=out)
        state.heard += words
        group = WindowGroup(state.index - 1, piece)
        state.groups.append(group)
        if state.coverage is not None:
            advance, jobs = cover_window(state, group, words, advance, self.sr)
            for job in jobs:
                self._submit_repair(state, job)
        if piece is not None:
            piece.end = shift + start + advance / self.sr
        release_groups(state, self.options.on_settled)
        if not state.long:
            self._finish(state)
            return
        if self.options.on_window is not None:
            self.options.on_window(state.row.id, max(advance, 1) / self.sr, state.expected_s)
        self._next_window(state, state.seek + max(advance, 1))

    def _keep(self, state: RowState, out: RequestOutput, temperature: float) -> None:
        """A window is kept: its finish reason, and the next window's prompt."""
        if is_repetition(out.token_ids, out.finish_reason):
            out.finish_reason = "repetition"
        state.prompt_text = None  # the initial prompt served the first window kept
        if state.prompt_ids is not None:
            # A loop carried forward in the prompt tends to repeat: neither a window kept
            # hot nor one that repeats itself prompts the next.
            if (temperature <= self.options.prompt_reset_on_temperature
                    and out.finish_reason != "repetition"):
                kept = (out.settled_token_ids if out.settled_token_ids is not None
                        else out.token_ids)
                state.prompt_ids = (state.prompt_ids + list(kept))[-CONTEXT_TOKENS:]
            else:
                state.prompt_ids = []

    def _submit_repair(self, state: RowState, job: RepairJob) -> None:
        assert state.coverage is not None
        fallback = self.options.fallback
        decoding = state.coverage.decoding(state.decoding, job, state.row.id,
                                           fallback.seed if fallback is not None else 0)
        self._queue.append(Request(f"{state.row.id}\x1fr{job.key}.{job.attempt}", job.audio,
                                   decoding, metadata={"row": state.row.id,
                                                       "repair": job.key}))

    def _accept_repair(self, state: RowState, out: RequestOutput) -> None:
        assert state.coverage is not None
        job = state.coverage.pending[out.metadata["repair"]]
        result = state.coverage.outcome(job, out, self.options.fallback)
        if result is True:
            self._submit_repair(state, job)
            return
        group = next(g for g in state.groups if g.index == job.group)
        group.pending -= 1
        if isinstance(result, Piece):
            group.repairs.append(result)
            state.heard += result.words or []
        release_groups(state, self.options.on_settled)
        if state.read_all:
            self._finish(state)

    # -- the loop ---------------------------------------------------------------------------
    def _requests(self) -> Iterator[Request | None]:
        """The engine's request source for one round: queued windows first, then new rows
        while fewer than ``max_active`` are open; ``None`` while every open row waits on the
        engine. The round ends when no row is open and the rows ran out, or finished rows
        (error rows need no engine) pile up to ``max_active``: the caller drains them."""
        while True:
            if self._queue:
                yield self._queue.popleft()
            elif (not self._rows_done and len(self.active) < self.max_active
                  and len(self.ready) + self._waiting() < self.max_active):
                row = next(self._rows, None)
                if row is None:
                    self._rows_done = True
                else:
                    self._started.append(row.id)
                    self._start(row)
            elif self.active:
                yield None
            else:
                return

    def run(self, rows: Iterator[ManifestRow]) -> Iterator[tuple[OutputRow, str | None]]:
        """Yield (output row, reference text) as rows finish."""
        for item in self.run_ticks(rows):
            if item is not None:
                yield item

    def run_ticks(self, rows: Iterator[ManifestRow]
                  ) -> Iterator[tuple[OutputRow, str | None] | None]:
        """:meth:`run`, also yielding ``None`` after each engine output: a consumer that
        follows windows as they settle (``on_settled``) gets control between them, so the
        decoding advances only as fast as it reads."""
        workers = self.options.decode_workers
        workers = default_workers(self.engine.runner.device.type) if workers is None else workers
        if self.prefetch_audio and workers > 0:
            self._prefetch = AudioPrefetch(workers, depth=self.prefetch_depth)
            rows = self._prefetch.rows(iter(rows), self._open_chunks)
        check = self.options.coverage
        if check is not None and self.options.word_timestamps:
            self._speech_ahead = speech_runner(check.detector, self.sr)
        self._rows, self._rows_done = iter(rows), False
        try:
            while True:
                for out in self.engine.run(self._requests()):
                    self._accept(out)
                    if self.on_output is not None:
                        self.on_output()
                    yield from self._drain()
                    yield None
                yield from self._drain()
                if self._rows_done and not self.active and not self._queue:
                    return
        finally:
            if self._prefetch is not None:
                self._prefetch.close()
                self._prefetch = None
            if self._speech_ahead is not None:
                self._speech_ahead.close()
                self._speech_ahead = None

    def _waiting(self) -> int:
        return sum(len(v) for v in self._held.values())

    def _drain(self) -> Iterator[tuple[OutputRow, str | None]]:
        """Finished rows in input order: a row that finished before an earlier one waits."""
        ready, self.ready = self.ready, []
        for out, ref in ready:
            self._held.setdefault(out.id, []).append((out, ref))
        while self._started and self._started[0] in self._held:
            row_id = self._started.popleft()
            waiting = self._held[row_id]
            yield waiting.pop(0)
            if not waiting:
                del self._held[row_id]

    def take_unreleased(self) -> list[tuple[OutputRow, str | None]]:
        """Every finished row not yet yielded (waiting on an earlier row, or not drained),
        for a run that stops early to write; out of input order."""
        rows = [entry for waiting in self._held.values() for entry in waiting] + self.ready
        self._held.clear()
        self.ready = []
        return rows


def peak(audio: np.ndarray) -> float:
    """max |sample| (0 for no samples), without the copy ``np.abs`` makes."""
    return max(float(audio.max(initial=0.0)), -float(audio.min(initial=0.0)))


def window_options(options: TranscribeOptions, row: ManifestRow) -> DecodingOptions:
    """The request options of ``row``'s windows before each window's own (timestamps, cap,
    prompt, prefix, temperature): the row's language and task, else the run's, word timings
    and the run's search options."""
    search = {k: v for k, v in options.search.items() if k != "prefix"}
    return DecodingOptions(language=row.language or options.language,
                           task=row.task or options.task,
                           word_timestamps=options.word_timestamps, **search)


def transcribe(engine: ASREngine, options: TranscribeOptions, writer: OutputWriter,
               on_row: Callable[[OutputRow, RunStats], Any] | None = None,
               transcriber: Transcriber | None = None) -> RunStats:
    """Transcribe every row not already in ``writer``'s output; returns the run's figures.
    ``transcriber``: a configured subclass (e.g. ``vad_segments.VadTranscriber``). A run that
    stops early (an exception, Ctrl-C) writes the rows it had finished but not yet released
    before aborting the writer.

    With ``options.output_thread`` the rows are written and their WER scored on a thread of
    their own (:mod:`oasr.transcribe.output_thread`): ``stats.wer`` is complete when this
    returns, not row by row in ``on_row``."""
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

    start, dispatched = time.perf_counter(), ops.snapshot()
    runner = transcriber or Transcriber(engine, options)
    output = OutputThread(writer, stats.wer).start() if options.output_thread else None
    try:
        if output is not None:
            runner.on_output = output.tick
        else:
            runner.on_output = getattr(writer, "flush_if_due", None)
        for out, ref in runner.run(todo()):
            if output is not None:
                output.put(out, ref)
                stats.add(out, None)  # the output thread scores the WER
            else:
                writer.write(out)
                stats.add(out, ref)
            stats.wall_s = time.perf_counter() - start
            if on_row is not None:
                on_row(out, stats)
        if output is not None:
            output.stop()
    except BaseException:
        try:
            if output is not None:
                output.stop(raise_error=False)  # the rows already handed over are written
            # Finished work is kept (a rerun skips it), out of input order.
            for out, _ in runner.take_unreleased():
                writer.write(out)
        finally:
            writer.abort()  # the run's own exception goes on either way
        raise
    stats.coverage_warnings = getattr(runner, "coverage_warnings", 0)
    stats.repairs = getattr(runner, "repairs", 0)
    stats.dispatch = ops.counts_since(dispatched)
    ops.record_dispatch(writer.metadata, stats.dispatch)
    writer.close()
    stats.wall_s = time.perf_counter() - start
    return stats
