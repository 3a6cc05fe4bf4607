"""The re-decode policy: streaming for a model that is not chunk-wise (Whisper).

Every ``step_s`` of new audio the stream's whole buffer is decoded again by the offline engine
(every ready stream's buffer in one batched engine pass), and ``HypothesisBuffer.agree`` commits
the word prefix this decode and the previous one agree on. The partial is the uncommitted tail.
The buffer is cut at the last committed sentence end once it is longer than ``trim_s`` (at the
last committed word past ``max_buffer_s``), so it stays inside the model's window.

Endpoints (``oasr.vad.endpointer``) close utterances: after a silence rule the buffer up to
the endpoint is decoded once more and everything new in it is committed (the final); rule 3
(utterance too long, usually mid-speech) closes the utterance on its committed words and leaves
the uncommitted tail to the next one, so a final never ends on a word cut in half. A buffer
with no speech frame is not decoded at all (Whisper invents text on silence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oasr.engine.request import DecodingOptions, Request
from oasr.streaming.agreement import HypothesisBuffer, Word
from oasr.streaming.stream import Stream, StreamOptions, StreamResult, join_words
from oasr.vad.endpointer import Endpoint


@dataclass
class RedecodeState:
    """A stream's agreement state: the hypotheses, this utterance's committed words and the
    clock sample the latest decode reached."""

    hypotheses: HypothesisBuffer = field(default_factory=HypothesisBuffer)
    words: list[Word] = field(default_factory=list)
    decoded_head: int = 0


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


class RedecodePolicy:
    """Decodes through the engine's offline path; needs a fixed window and word timings."""

    kind = "re-decode"

    def __init__(self, engine: Any, options: StreamOptions) -> None:
        self.engine = engine
        self.window_s = engine.inputs.config.fixed_window_seconds
        if self.window_s is None:
            raise ValueError(
                f"{type(engine.model).__name__} has neither a chunk-wise encoder "
                "(streaming_kind='none') nor a fixed window to re-decode; it cannot stream. "
                "A WeNet Conformer streams when trained causal with chunks; Whisper re-decodes")
        if "offline" not in engine.strategy.word_timing_modes:
            raise ValueError(
                f"decode family {engine.decode_method!r} cannot time words in this "
                "configuration, and the re-decode policy commits by word times; use greedy "
                "decoding (no beam_size)")
        options.validate(self.window_s)

    # -- streams ------------------------------------------------------------------------------
    def open(self, stream: Stream) -> None:
        stream.options.validate(self.window_s)
        stream.state = RedecodeState()

    def close(self, stream: Stream) -> None:
        stream.state = None

    def is_ready(self, stream: Stream) -> bool:
        return next_job(stream) is not None

    def result(self, s: Stream) -> StreamResult:
        if s.final is not None:
            return s.final
        st: RedecodeState = s.state
        return StreamResult(
            committed=join_words(st.words), partial=join_words(st.hypotheses.partial),
            words=list(st.words), is_final=False, start=s.utterance_start / s.sample_rate,
            end=st.decoded_head / s.sample_rate, segment=s.segment)

    def reset(self, s: Stream) -> None:
        """The next utterance: after a final, where it ended; otherwise the hypothesis is
        dropped and it starts at the decoded head."""
        st: RedecodeState = s.state
        if s.final is None:
            st.hypotheses.previous = []
        start = s.final_end if s.final is not None else st.decoded_head
        st.words = []
        s.start_utterance(start)

    # -- the step -----------------------------------------------------------------------------
    def decode(self, streams: list[Stream]) -> None:
        """Every ready stream's buffer in one batched engine pass."""
        jobs = [j for j in (next_job(s) for s in streams) if j is not None]
        decoding: dict[str, Job] = {}
        for j in jobs:
            if j.needs_model:
                rid = f"stream{j.stream.id}:{j.stream.stats.decodes}:{j.kind}"
                decoding[rid] = j
                opts = DecodingOptions(language=j.stream.options.language,
                                       task=j.stream.options.task, word_timestamps=True)
                self.engine.add_request(Request(rid, j.stream.buffer(j.end), opts))
        outs = {}
        while self.engine.has_unfinished():
            for out in self.engine.step():
                outs[out.request_id] = out
        words_of = {id(j): [] for j in jobs}
        for rid, j in decoding.items():
            out = outs[rid]
            if out.error:
                raise RuntimeError(f"stream {j.stream.id}: {out.error}")
            words_of[id(j)] = words_on_clock(j.stream, out.words, j.end)
        for j in jobs:
            apply(j, words_of[id(j)])


def next_job(stream: Stream) -> Job | None:
    """The decode ``stream`` is ready for, or None (not enough new audio, or a final is waiting
    for ``reset``)."""
    if stream.final is not None or stream.flushed:
        return None
    sr = stream.sample_rate
    step = int(round(stream.options.step_s * sr))
    max_step = int(round(stream.options.max_step_s * sr))
    head = stream.state.decoded_head
    reach = head + max_step
    if stream.endpoints:
        e = stream.endpoints[0]
        end = stream.endpoint_sample(e)
        if end <= reach:
            return Job(stream, "endpoint", end, e)
        return Job(stream, "partial", reach) if stream.received >= reach else None
    if stream.finished and stream.received <= reach:
        return Job(stream, "flush", stream.received)
    target = min(stream.received, reach)
    return Job(stream, "partial", target) if target - head >= step else None


def words_on_clock(stream: Stream, out_words: list, end: int) -> list[Word]:
    """The engine's request-relative word timings -> ``Word``s on the stream's clock."""
    offset = stream.base / stream.sample_rate
    limit = end / stream.sample_rate
    return [Word(w.word.strip(), offset + w.start, min(offset + w.end, limit), w.confidence)
            for w in out_words or [] if w.word.strip()]


def apply(job: Job, words: list[Word]) -> None:
    """Fold a decode's words (clock times; [] when not decoded) into the stream."""
    s = job.stream
    st: RedecodeState = s.state
    stats = s.stats
    sr = s.sample_rate
    stats.note_first_speech(s)
    if job.needs_model:
        stats.decodes += 1
    if job.kind == "partial":
        committed = st.hypotheses.agree(words)
        _commit(s, committed, job.end)
        if stats.first_text_head is None and (committed or st.hypotheses.previous):
            stats.first_text_head = job.end / sr
        st.decoded_head = max(st.decoded_head, job.end)
        _trim(s, job.end)
        return
    if job.kind == "endpoint" and job.endpoint.rule == 3:
        s.endpoints.pop(0)
        end = st.words[-1].end if st.words else st.decoded_head / sr
        s.finalize(list(st.words), join_words(st.words), int(round(end * sr)), 3)
        return
    _commit(s, st.hypotheses.commit_all(words), job.end)
    if stats.first_text_head is None and st.words:
        stats.first_text_head = job.end / sr
    if job.kind == "endpoint":
        s.endpoints.pop(0)
    else:
        s.flushed = True
    st.hypotheses.committed_end = max(st.hypotheses.committed_end, job.end / sr)
    st.decoded_head = max(st.decoded_head, job.end)
    _drop_until(s, job.end)
    s.finalize(list(st.words), join_words(st.words), job.end,
               job.endpoint.rule if job.endpoint else None)


def _commit(s: Stream, words: list[Word], head: int) -> None:
    s.state.words += words
    s.stats.commit_lags += [head / s.sample_rate - w.end for w in words]


def _drop_until(s: Stream, sample: int) -> None:
    s.drop_until(sample)
    s.state.hypotheses.drop_before(s.base / s.sample_rate)


def _trim(s: Stream, head: int) -> None:
    """Cut the buffer at a committed sentence end past ``trim_s``, at a committed word past
    ``max_buffer_s``; with nothing committed past ``max_buffer_s``, commit the latest decode."""
    sr = s.sample_rate
    hypotheses = s.state.hypotheses
    length = (head - s.base) / sr
    if length <= s.options.trim_s:
        return
    tail = hypotheses.committed_tail
    cut = next((w.end for w in reversed(tail) if w.ends_sentence), None)
    if cut is None and length > s.options.max_buffer_s:
        if not tail:
            _commit(s, hypotheses.commit_previous(), head)
            tail = hypotheses.committed_tail
        cut = tail[-1].end if tail else head / sr
    if cut is not None:
        _drop_until(s, min(int(round(cut * sr)), head))
