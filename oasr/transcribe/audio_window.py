"""Forward-only windows over a recording decoded in chunks, in bounded memory.

Long-form decoding asks for the window at a sample offset that only ever moves forward (the
next window starts where the last one settled). ``ForwardAudio`` keeps the samples from the
current window's start on and forgets everything before it, so a 1-hour file costs about two
windows (the coverage detector reads one ahead, :meth:`ForwardAudio.peek`) plus one decoding
chunk of memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class ForwardAudio:
    """Windows and peeks are read-only views: the buffer is only ever replaced, never written in
    place, so a view stays valid (and keeps its samples alive) after the window moves on."""

    def __init__(self, chunks: Iterator[np.ndarray]) -> None:
        self._chunks = chunks
        self._buf = np.zeros(0, dtype=np.float32)
        self._start = 0  # recording sample of _buf[0]
        self._eof = False

    @property
    def total(self) -> int:
        """Samples seen so far; the recording's length once the end has been read."""
        return self._start + len(self._buf)

    def _fill(self, end: int) -> None:
        parts = [self._buf] if len(self._buf) else []
        have = self.total
        while not self._eof and have < end:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._eof = True
                break
            chunk = np.asarray(chunk, dtype=np.float32)
            parts.append(chunk)
            have += len(chunk)
        if len(parts) > 1:  # one copy per fill, however many chunks it took
            self._buf = np.concatenate(parts)
        elif parts:
            self._buf = parts[0]

    def window(self, start: int, length: int) -> np.ndarray:
        """Samples ``[start, start + length)`` (fewer at the end); forgets what precedes start.

        Raises:
            ValueError: ``start`` moved backwards.
        """
        if start < self._start:
            raise ValueError(f"windows only move forward ({start} < {self._start})")
        self._fill(start + length)
        drop = min(start - self._start, len(self._buf))
        self._buf = self._buf[drop:]
        self._start += drop
        return self._view(start, length)

    def peek(self, start: int, length: int) -> np.ndarray:
        """Samples ``[start, start + length)`` (fewer at the end) without forgetting anything:
        audio read ahead of the windows (the coverage detector's blocks).

        Raises:
            ValueError: ``start`` precedes what is kept.
        """
        if start < self._start:
            raise ValueError(f"samples before {self._start} are forgotten ({start})")
        self._fill(start + length)
        return self._view(start, length)

    def _view(self, start: int, length: int) -> np.ndarray:
        offset = start - self._start
        view = self._buf[offset:offset + length]
        view.flags.writeable = False
        return view

    def has_more(self, pos: int) -> bool:
        """Whether the recording has a sample at ``pos``."""
        self._fill(pos + 1)
        return self.total > pos


def quiet_cut(audio: np.ndarray, sample_rate: int, search_s: float = 2.0,
              frame_s: float = 0.02) -> int:
    """Where to end a window that cannot resume from a timestamp: the start of the quietest
    ``frame_s`` frame in its last ``search_s`` seconds, so a seam falls between words rather
    than through one. Returns a sample count in (0, len(audio)]."""
    hop = max(1, int(frame_s * sample_rate))
    tail = min(len(audio) // 2, int(search_s * sample_rate)) // hop * hop
    if tail < hop:
        return len(audio)
    start = len(audio) - tail
    frames = audio[start:].astype(np.float64).reshape(-1, hop)
    return start + int(np.argmin((frames * frames).mean(axis=1))) * hop


# How far before Whisper's resume timestamp a pause may end for the next window to start there.
ONSET_LOOKBACK_S = 0.6


def resume_before_onset(audio: np.ndarray, sample_rate: int, resume_s: float,
                        last_word_end: float) -> float:
    """Where a window resuming at ``resume_s`` (seconds into ``audio``) should start.

    Whisper's last closed timestamp often lands a little after the next utterance began;
    resuming there cuts its first word. When a pause ends shortly before the resume point and
    the window's last timed word ended before that pause, resume at the pause's end; a resume
    point inside a pause stays (the next utterance has not begun)."""
    from oasr.engine.decode.pauses import speech_pauses

    frame = 0.02
    starts, ends = speech_pauses(audio, sample_rate, frame)
    pauses = list(zip(starts * frame, ends * frame))
    if any(ps <= resume_s < pe for ps, pe in pauses):
        return resume_s
    for ps, pe in pauses:
        if resume_s - ONSET_LOOKBACK_S <= pe < resume_s and last_word_end <= ps + frame:
            return float(pe)
    return resume_s
