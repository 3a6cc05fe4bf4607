"""One live stream: resampled audio on the stream's clock, its speech trace, endpoints and result.

``Stream.accept_waveform(sample_rate, samples)`` takes chunks of any size at any rate (a rate
change mid-stream flushes the old resampler and starts a new one); the samples land at the
model's rate on the stream's clock, which counts model-rate samples since the stream began and
is never reset. The stream keeps what every policy shares: the audio buffer, the detector's
trace (speech runs and endpoints, filled by ``oasr.streaming.detector``), the current
utterance and its final. What a policy keeps per stream is its own ``state`` (``RedecodeState``,
``ChunkState``), attached when the policy opens the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oasr.audio.resample import StreamResampler
from oasr.streaming.agreement import Word
from oasr.vad.endpointer import Endpoint, EndpointConfig, Endpointer


@dataclass
class StreamOptions:
    """How a stream is decoded and segmented.

    step_s: new audio between two re-decodes of the buffer (the partial cadence).
    max_step_s: the most audio one decode may advance by; a live source that falls behind
        catches up in steps this large, a file fed faster than real time is decoded as if live
        at ``step_s`` when ``max_step_s == step_s``.
    trim_s: a buffer longer than this is cut at its last committed sentence end.
    max_buffer_s: a buffer longer than this is cut at its last committed word, whatever it is.
    detector: the speech detector endpoints come from: a name on the speech-detector axis
        (``oasr.vad``) that serves the ``stream`` role from audio (``energy``, ``silero``).
    detector_model_dir: a folder with the detector's weights (``None``: its weight package).
    language / task: passed to the model (Whisper).
    chunk_frames / left_chunks: a chunk-wise encoder's decoding chunk (encoder frames) and
        left window in chunks (-1: every earlier frame); ``None``: the model's declaration.
    max_streams: streams a chunk-wise runtime holds at once.
    """

    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    step_s: float = 1.0
    max_step_s: float = 5.0
    trim_s: float = 15.0
    max_buffer_s: float = 24.0
    detector: str = "energy"
    detector_model_dir: str | None = None
    language: str | None = None
    task: str | None = None
    chunk_frames: int | None = None
    left_chunks: int | None = None
    max_streams: int = 64

    def validate(self, window_s: float | None) -> None:
        if not 0 < self.step_s <= self.max_step_s:
            raise ValueError(f"need 0 < step_s <= max_step_s, got {self.step_s}, "
                             f"{self.max_step_s}")
        if not 0 < self.trim_s <= self.max_buffer_s:
            raise ValueError(f"need 0 < trim_s <= max_buffer_s, got {self.trim_s}, "
                             f"{self.max_buffer_s}")
        if window_s is not None and self.max_buffer_s + self.max_step_s > window_s:
            raise ValueError(
                f"max_buffer_s + max_step_s = {self.max_buffer_s + self.max_step_s} s exceeds "
                f"the model's {window_s:.0f} s window; lower them")


@dataclass
class StreamResult:
    """What ``get_result`` returns: the current utterance's text so far, or its final.

    committed: text that will not change; partial: the uncommitted tail of the latest decode;
    words: the committed words with start/end on the stream's clock (seconds); start / end: the
    utterance's span on that clock; is_final: the utterance ended (an endpoint, or the input);
    token_ids: a final's token ids where the streaming path decodes tokens itself (chunk-wise
    models), else None; coverage: a final's detected speech seconds covered by its words over
    those detected (``oasr.transcribe.coverage``'s rules; 1.0 without detected speech).
    """

    committed: str = ""
    partial: str = ""
    words: list[Word] = field(default_factory=list)
    is_final: bool = False
    start: float = 0.0
    end: float = 0.0
    segment: int = 0
    endpoint_rule: int | None = None
    token_ids: list[int] | None = None
    coverage: float | None = None

    @property
    def text(self) -> str:
        return " ".join(t for t in (self.committed, self.partial) if t)


@dataclass
class StreamStats:
    """Latency figures on the stream's clock (seconds of audio, not wall time)."""

    decodes: int = 0
    first_text_head: float | None = None  # audio heard when the first word (partial) appeared
    first_speech: float | None = None  # start of the first speech frame
    commit_lags: list[float] = field(default_factory=list)  # per word: head at commit - end
    # The finals' detected speech against their words (oasr.transcribe.coverage): seconds
    # detected, seconds covered, and the stretches no word covered (seconds on the clock).
    speech_s: float = 0.0
    covered_s: float = 0.0
    uncovered: list[tuple[float, float]] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        """Covered over detected speech seconds of the finals so far (1.0 without speech)."""
        from oasr.transcribe.coverage import coverage_ratio

        return coverage_ratio(self.covered_s, self.speech_s)

    def note_first_speech(self, stream: Stream) -> None:
        if self.first_speech is None and stream.speech_runs:
            self.first_speech = stream.speech_runs[0][0] / stream.sample_rate


def join_words(words: list[Word]) -> str:
    return " ".join(w.text.strip() for w in words if w.text.strip())


class Stream:
    """One source's audio and utterance state. Build through ``recognizer.create_stream``.

    ``detector`` is the recognizer's ``StreamingVadPool`` this stream is open on (its frame
    size and silence floor); the detector itself runs in ``decode_streams``, batched across
    streams."""

    def __init__(self, sample_rate: int, options: StreamOptions, stream_id: int,
                 detector: Any) -> None:
        self.id = stream_id
        self.sample_rate = sample_rate
        self.options = options
        self.detector = detector
        self.frame_samples: int = detector.frame_samples
        self.endpointer = Endpointer(detector.frame_s, options.endpoint,
                                     detector.spec.min_silence_floor_ms / 1000.0)
        self._resampler: StreamResampler | None = None
        self._undetected = np.zeros(0, dtype=np.float32)  # samples not yet through the detector
        self.audio = np.zeros(0, dtype=np.float32)  # the buffer: clock samples [base, received)
        self.base = 0  # clock sample of audio[0]
        self.received = 0
        self.speech_runs: list[list[int]] = []  # [start, end) clock samples of speech frames
        # The same runs kept until their utterance's final is measured against its words
        # (the buffer's runs are dropped with the buffer, mid-utterance).
        self._final_runs: list[list[int]] = []
        self.endpoints: list[Endpoint] = []
        self.finished = False
        self.flushed = False
        self.stats = StreamStats()
        self.final_end = 0  # clock sample where the last final ended
        self.segment = -1
        self.state: Any = None  # the policy's per-stream state, attached by its ``open``
        self.start_utterance(0)

    # -- input --------------------------------------------------------------------------------
    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """samples: (n,) float in [-1, 1] at ``sample_rate`` (any n, including 0)."""
        if self.finished:
            raise ValueError(f"stream {self.id}: input_finished() was called; reset(stream) "
                             "or create a new stream to accept more audio")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        out = []
        if self._resampler is not None and self._resampler.in_rate != sample_rate:
            out.append(self._resampler.push(np.zeros(0, np.float32), last=True))
            self._resampler = None
        if self._resampler is None:
            self._resampler = StreamResampler(sample_rate, self.sample_rate)
        out.append(self._resampler.push(x))
        self._append(np.concatenate(out))

    def input_finished(self) -> None:
        """No more audio: the rest is decoded into a last final."""
        if self.finished:
            return
        if self._resampler is not None:
            self._append(self._resampler.push(np.zeros(0, np.float32), last=True))
        self.finished = True

    def _append(self, x: np.ndarray) -> None:
        if len(x):
            self.audio = np.concatenate([self.audio, x])
            self.received += len(x)
            self._undetected = np.concatenate([self._undetected, x])

    # -- the detector's trace -----------------------------------------------------------------
    @property
    def undetected_frames(self) -> int:
        """Whole detector frames received but not yet through the detector."""
        return len(self._undetected) // self.frame_samples

    def take_undetected(self) -> np.ndarray:
        """The whole detector frames not yet detected (their samples); the rest stays."""
        n = self.undetected_frames * self.frame_samples
        out, self._undetected = self._undetected[:n], self._undetected[n:]
        return out

    def add_speech_probabilities(self, probs: np.ndarray) -> None:
        """The detector's probabilities for the frames ``take_undetected`` gave it, in order:
        the endpointer classifies them (speech runs) and finds the endpoints."""
        first = self.endpointer.frames
        speech, endpoints = self.endpointer.push(probs)
        fs = self.frame_samples
        for i in np.flatnonzero(speech):
            a, b = (first + int(i)) * fs, (first + int(i) + 1) * fs
            for runs in (self.speech_runs, self._final_runs):
                if runs and runs[-1][1] == a:
                    runs[-1][1] = b
                else:
                    runs.append([a, b])
        self.endpoints += endpoints

    def endpoint_sample(self, endpoint: Endpoint) -> int:
        """The clock sample where ``endpoint`` starts the next utterance."""
        return endpoint.frame * self.frame_samples

    def has_speech(self, start: int, end: int) -> bool:
        """Whether any detector frame in clock samples [start, end) was speech."""
        return any(a < end and b > start for a, b in reversed(self.speech_runs))

    # -- the buffer ---------------------------------------------------------------------------
    def buffer(self, end: int) -> np.ndarray:
        """Clock samples [base, end) of the buffer."""
        return self.audio[: max(end - self.base, 0)]

    def drop_until(self, sample: int) -> None:
        """Forget buffer audio before clock ``sample``."""
        cut = min(max(sample - self.base, 0), len(self.audio))
        self.audio = self.audio[cut:]
        self.base += cut
        self.speech_runs = [r for r in self.speech_runs if r[1] > self.base]

    # -- the utterance ------------------------------------------------------------------------
    def start_utterance(self, start: int) -> None:
        """Start the next utterance at clock ``start``; the stream's buffer and clock stay."""
        self.utterance_start = start
        self.final: StreamResult | None = None
        self.segment += 1

    def finalize(self, words: list[Word], text: str, end_sample: int, rule: int | None,
                 token_ids: list[int] | None = None) -> None:
        """Close the current utterance: its final (``text`` and ``words`` on the clock, and
        ``token_ids`` where the policy decodes tokens) ends at clock ``end_sample``; the next
        starts there on ``reset``."""
        start = self.utterance_start / self.sample_rate
        end_s = end_sample / self.sample_rate
        self.final = StreamResult(
            committed=text, partial="", words=words, is_final=True,
            start=words[0].start if words else start, end=words[-1].end if words else end_s,
            segment=self.segment, endpoint_rule=rule, token_ids=token_ids,
            coverage=self._measure(words, end_sample))
        self.final_end = end_sample

    def _measure(self, words: list[Word], end_sample: int) -> float:
        """The final's coverage: the detected speech before ``end_sample`` not yet measured
        against the words of this final; the stream's totals follow."""
        from oasr.transcribe.coverage import (
            CoverageRules,
            coverage_ratio,
            covered_seconds,
            uncovered,
        )

        sr = self.sample_rate
        speech = [(a / sr, min(b, end_sample) / sr) for a, b in self._final_runs if a < end_sample]
        self._final_runs = [[max(a, end_sample), b] for a, b in self._final_runs if b > end_sample]
        rules = CoverageRules()
        covered, total = covered_seconds(speech, words, rules)
        self.stats.speech_s += total
        self.stats.covered_s += covered
        self.stats.uncovered += uncovered(speech, words, rules)
        return coverage_ratio(covered, total)

    def seconds(self, sample: int) -> float:
        return sample / self.sample_rate
