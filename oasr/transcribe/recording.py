"""One recording in flight through the sequential runner: its windows, the repairs of the
speech they left uncovered, and the row they make.

A kept window becomes a :class:`WindowGroup` with its repairs (:mod:`oasr.transcribe.repair`);
groups are released in the recording's order once their repairs are back and, with word timings
and a coverage detector, the next group is settled too (:func:`release_groups`: its words are
snapped to the detected speech knowing what follows), each assembled into segments, text and words
(:func:`oasr.transcribe.segments.assemble`) and reported as a :class:`SettledWindow`, so a lazy
reader sees final segments in order. :func:`cover_window` checks a window's speech against its
words: the next window never starts past speech after the window's last word that no word
covers (it starts there, at least ``MIN_RESUME_ADVANCE_S`` on), and the stretches before that
are repaired. :func:`summary_row` is the finished row, its ``coverage`` and warning included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oasr.engine.request import DecodingOptions, RequestOutput
from oasr.io import ManifestRow, OutputRow
from oasr.io.subtitles import join_words
from oasr.transcribe.audio_window import ForwardAudio
from oasr.transcribe.repair import PAD_S, RepairJob, RowCoverage
from oasr.transcribe.rows import assemble_row, no_speech_row
from oasr.transcribe.segments import Piece, assemble

__all__ = ["MIN_RESUME_ADVANCE_S", "RowState", "SettledWindow", "WindowGroup", "cover_window",
           "release_groups", "summary_row"]

# A window whose uncovered tail starts sooner than this after its own start does not move the
# next window back there (it could not advance): the tail is repaired instead.
MIN_RESUME_ADVANCE_S = 1.0


@dataclass
class SettledWindow:
    """One kept window of a recording, as it settles (``TranscribeOptions.on_settled``): its
    segments and words on the recording's clock (its repairs' included), and the decode that
    produced them."""

    row_id: str
    index: int  # the recording's kept windows, counted from 0
    start: float  # seconds from the recording's start where the window began
    temperature: float
    output: RequestOutput
    segments: list[dict[str, Any]]
    words: list[dict[str, Any]]


@dataclass
class WindowGroup:
    """One window of a recording and the repairs of the speech it left uncovered."""

    index: int
    piece: Piece | None  # None: the window kept nothing (silent)
    pending: int = 0
    repairs: list[Piece] = field(default_factory=list)

    def pieces(self) -> list[Piece]:
        return sorted(([self.piece] if self.piece else []) + self.repairs,
                      key=lambda p: p.start)


@dataclass
class RowState:
    """One recording in flight: at most one window of it is with the engine at a time (its
    repairs run beside it)."""

    row: ManifestRow
    reader: ForwardAudio
    decoding: DecodingOptions
    long: bool = False
    expected_s: float | None = None  # a long recording's duration from its header, if known
    seek: int = 0  # sample where the window in flight starts
    window_len: int = 0  # samples in the window in flight
    index: int = 0
    attempt: int = 0  # index into the fallback temperatures of the window in flight
    retries: int = 0  # windows of this row decoded again at a higher temperature
    # The window in flight is the shorter one decoded again after its first segment was a
    # skip (oasr.transcribe.skip_guard); its samples when so.
    narrowed: int | None = None
    read_all: bool = False  # every window is decoded; the row waits on its repairs only
    groups: deque[WindowGroup] = field(default_factory=deque)
    settled: list[WindowGroup] = field(default_factory=list)  # released, in order
    texts: list[str] = field(default_factory=list)  # per released group
    segments: list[dict[str, Any]] = field(default_factory=list)
    words: list[dict[str, Any]] = field(default_factory=list)
    heard: list[dict[str, Any]] = field(default_factory=list)  # every kept word so far
    coverage: RowCoverage | None = None
    # The next window's prompt: the initial prompt's text until a window is kept; with
    # conditioning, token ids instead (the initial prompt's, then the windows' settled tokens,
    # timestamps included, since the last reset).
    prompt_text: str | None = None
    prompt_ids: list[int] | None = None
    prefix: str | None = None  # forced on the first window decoded (and its retries) only


def cover_window(state: RowState, group: WindowGroup, words: list[dict[str, Any]],
                 advance: int, sample_rate: int) -> tuple[int, list[RepairJob]]:
    """The window in flight's speech against its words: (the advance, pulled back to speech
    after its last word that no word covers; the repairs of the stretches before it)."""
    coverage = state.coverage
    assert coverage is not None
    start = state.row.offset + state.seek / sample_rate
    audio = state.reader.window(state.seek, state.window_len)
    speech = coverage.detect(state.seek, len(audio), state.row.offset)
    end = start + advance / sample_rate
    gaps = coverage.gaps([(a, min(b, end)) for a, b in speech if a < end], state.heard)
    last = max((w["end"] for w in words), default=start)
    tail = [g for g in gaps if g[0] >= last]
    if state.long and tail:
        resume = max(tail[0][0] - PAD_S, last) - start
        if resume >= MIN_RESUME_ADVANCE_S:
            advance = int(resume * sample_rate)
            gaps = gaps[:len(gaps) - len(tail)]
    end = start + advance / sample_rate
    coverage.settle(speech, start, end)
    jobs = coverage.all_jobs([(a, min(b, end)) for a, b in speech if a < end], state.heard,
                             audio, start, group.index, gaps)
    group.pending += len(jobs)
    return advance, jobs


def _first_word(group: WindowGroup) -> dict[str, Any] | None:
    return next((w for p in group.pieces() for w in p.words or []), None)


def release_groups(state: RowState, on_settled: Callable[[SettledWindow], Any] | None) -> None:
    """Add the groups whose repairs are all back to the row, in order, and report them. With
    word timings and a coverage detector a group waits for the next one to settle too (or the
    row to be read to its end): its words are snapped to the detected speech knowing the
    speech and the word after it (a sentence's first word Whisper left before a pause moves
    across it, into the next window's speech)."""
    coverage = state.coverage
    hold = coverage is not None and bool(state.decoding.word_timestamps)
    while state.groups and not state.groups[0].pending:
        if hold and not state.read_all and (len(state.groups) < 2 or state.groups[1].pending):
            return
        group = state.groups.popleft()
        pieces = group.pieces()
        if not pieces:
            continue
        previous_end = state.segments[-1]["end"] if state.segments else 0.0
        text, segments, words = assemble(
            pieces, previous_end, speech=coverage.speech if coverage is not None else None,
            settled_to=coverage.settled_to if coverage is not None else 0.0,
            before=state.words[-1] if state.words else None,
            after=_first_word(state.groups[0]) if state.groups else None)
        state.settled.append(group)
        state.texts.append(text)
        state.segments += segments
        state.words += words or []
        if on_settled is not None:
            first = group.piece or pieces[0]
            on_settled(SettledWindow(
                row_id=state.row.id, index=len(state.settled) - 1,
                start=first.start - state.row.offset, temperature=first.temperature,
                output=first.source, segments=segments, words=words or []))


def summary_row(state: RowState, duration: float) -> OutputRow:
    """The finished row: its released groups' text, segments and words, and its coverage."""
    timed = bool(state.decoding.word_timestamps)
    coverage = state.coverage
    if not state.texts:  # every window was silent: nothing decoded or nothing kept
        out = no_speech_row(state.row, duration, timed, state.long)
    else:
        outs = [p.source for g in state.settled for p in g.pieces()]
        text = state.texts[0] if len(state.texts) == 1 else join_words(state.texts)
        out = assemble_row(state.row, outs, duration=duration, texts=[text],
                           segments=state.segments, words=state.words if timed else None)
    if coverage is not None and timed:
        out.coverage = coverage.figure(state.words)
        warning = coverage.warning(state.words)
        if warning:
            out.warnings.append(warning)
    return out
