"""The re-decode policy: streaming for a model that is not chunk-wise (Whisper).

Every ``step_s`` of new audio the stream's whole buffer is decoded again by the offline engine
(every ready stream's buffer in one batched engine pass), and ``HypothesisBuffer.agree`` commits
the word prefix this decode and the previous one agree on. The partial is the uncommitted tail.
The buffer is cut at the last committed sentence end once it is longer than ``trim_s`` (at the
last committed word past ``max_buffer_s``), so it stays inside the model's window.

Endpoints (``oasr.streaming.endpoint``) close utterances: after a silence rule the buffer up to
the endpoint is decoded once more and everything new in it is committed (the final); rule 3
(utterance too long, usually mid-speech) closes the utterance on its committed words and leaves
the uncommitted tail to the next one, so a final never ends on a word cut in half. A buffer
with no speech frame is not decoded at all (Whisper invents text on silence).
"""

from __future__ import annotations

from dataclasses import dataclass

from oasr.streaming.agreement import Word
from oasr.streaming.endpoint import Endpoint
from oasr.streaming.stream import Stream, StreamResult, StreamStats, join_words


@dataclass
class Job:
    """One decode a stream is ready for: ``kind`` is "partial", "endpoint" or "flush"; ``end`` is
    the clock sample the buffer is decoded up to."""

    stream: Stream
    kind: str
    end: int
    endpoint: Endpoint | None = None

    @property
    def needs_model(self) -> bool:
        s = self.stream
        if self.kind == "endpoint" and self.endpoint.rule == 3:
            return False
        return s.has_speech(s.base, self.end)


def next_job(stream: Stream) -> Job | None:
    """The decode ``stream`` is ready for, or None (not enough new audio, or a final is waiting
    for ``reset``)."""
    if stream.final is not None or stream.flushed:
        return None
    sr = stream.sample_rate
    step = int(round(stream.options.step_s * sr))
    max_step = int(round(stream.options.max_step_s * sr))
    reach = stream.decoded_head + max_step
    if stream.endpoints:
        e = stream.endpoints[0]
        end = e.frame * stream.detector.frame_samples
        if end <= reach:
            return Job(stream, "endpoint", end, e)
        return Job(stream, "partial", reach) if stream.received >= reach else None
    if stream.finished and stream.received <= reach:
        return Job(stream, "flush", stream.received)
    target = min(stream.received, reach)
    return Job(stream, "partial", target) if target - stream.decoded_head >= step else None


def words_on_clock(stream: Stream, out_words: list, end: int) -> list[Word]:
    """The engine's request-relative word timings -> ``Word``s on the stream's clock."""
    offset = stream.base / stream.sample_rate
    limit = end / stream.sample_rate
    return [Word(w.word.strip(), offset + w.start, min(offset + w.end, limit), w.confidence)
            for w in out_words or [] if w.word.strip()]


def apply(job: Job, words: list[Word]) -> None:
    """Fold a decode's words (clock times; [] when not decoded) into the stream."""
    s = job.stream
    stats = s.stats
    sr = s.sample_rate
    if stats.first_speech is None and s.speech_runs:
        stats.first_speech = s.speech_runs[0][0] / sr
    if job.needs_model:
        stats.decodes += 1
    if job.kind == "partial":
        committed = s.hypotheses.agree(words)
        _commit(s, committed, job.end, stats)
        if stats.first_text_head is None and (committed or s.hypotheses.previous):
            stats.first_text_head = job.end / sr
        s.decoded_head = max(s.decoded_head, job.end)
        _trim(s, job.end, stats)
        return
    if job.kind == "endpoint" and job.endpoint.rule == 3:
        s.endpoints.pop(0)
        end = s.words[-1].end if s.words else s.decoded_head / sr
        _finalize(s, end, 3)
        return
    _commit(s, s.hypotheses.commit_all(words), job.end, stats)
    if stats.first_text_head is None and s.words:
        stats.first_text_head = job.end / sr
    if job.kind == "endpoint":
        s.endpoints.pop(0)
    else:
        s.flushed = True
    s.hypotheses.committed_end = max(s.hypotheses.committed_end, job.end / sr)
    s.decoded_head = max(s.decoded_head, job.end)
    s.drop_until(job.end)
    _finalize(s, job.end / sr, job.endpoint.rule if job.endpoint else None)


def _commit(s: Stream, words: list[Word], head: int, stats: StreamStats) -> None:
    s.words += words
    stats.commit_lags += [head / s.sample_rate - w.end for w in words]


def _finalize(s: Stream, end_s: float, rule: int | None) -> None:
    start = s.utterance_start / s.sample_rate
    words = list(s.words)
    s.final = StreamResult(
        committed=join_words(words), partial="", words=words, is_final=True,
        start=words[0].start if words else start, end=words[-1].end if words else end_s,
        segment=s.segment, endpoint_rule=rule,
    )
    s.final_end = int(round(end_s * s.sample_rate))


def _trim(s: Stream, head: int, stats: StreamStats) -> None:
    """Cut the buffer at a committed sentence end past ``trim_s``, at a committed word past
    ``max_buffer_s``; with nothing committed past ``max_buffer_s``, commit the latest decode."""
    sr = s.sample_rate
    length = (head - s.base) / sr
    if length <= s.options.trim_s:
        return
    tail = s.hypotheses.committed_tail
    cut = next((w.end for w in reversed(tail) if w.ends_sentence), None)
    if cut is None and length > s.options.max_buffer_s:
        if not tail:
            _commit(s, s.hypotheses.commit_previous(), head, stats)
            tail = s.hypotheses.committed_tail
        cut = tail[-1].end if tail else head / sr
    if cut is not None:
        s.drop_until(min(int(round(cut * sr)), head))


def partial_result(s: Stream) -> StreamResult:
    if s.final is not None:
        return s.final
    return StreamResult(
        committed=join_words(s.words), partial=join_words(s.hypotheses.partial),
        words=list(s.words), is_final=False, start=s.utterance_start / s.sample_rate,
        end=s.decoded_head / s.sample_rate, segment=s.segment,
    )
