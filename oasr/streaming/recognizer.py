"""The stream API, sherpa-onnx's shape, over an ``ASREngine``.

    rec = StreamingRecognizer(engine)
    s = rec.create_stream()
    s.accept_waveform(48000, chunk)          # any rate, any chunk size
    while rec.is_ready(s):
        rec.decode_streams([s])              # every ready stream in one batched step
    r = rec.get_result(s)                    # r.committed, r.partial, r.words, r.is_final
    if rec.is_endpoint(s):
        handle(r); rec.reset(s)              # the final is kept until reset
    s.input_finished()                       # then decode until not ready: the last final

A model whose encoder is not chunk-wise but reads a fixed window (Whisper) streams through the
re-decode policy (``oasr.streaming.redecode``); a chunk-wise encoder (``streaming_kind`` paged,
slot or stateful) streams through its runtime on the streaming-runtime axis
(``oasr.engine.streaming_backend``) under the chunk-wise policy (``oasr.streaming.chunkwise``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.streaming import redecode
from oasr.streaming.chunkwise import ChunkwisePolicy
from oasr.streaming.stream import Stream, StreamOptions, StreamResult


class StreamingRecognizer:
    """Streams decoded through one engine; ``decode_streams`` batches them."""

    def __init__(self, engine: ASREngine, options: StreamOptions | None = None) -> None:
        self.engine = engine
        self.options = options or StreamOptions()
        encoder = getattr(engine.model, "encoder", engine.model)
        kind = getattr(encoder, "streaming_kind", "none")
        self.window_s = engine.inputs.config.fixed_window_seconds
        self._ids = itertools.count()
        self.chunkwise: ChunkwisePolicy | None = None
        if kind != "none":
            self.chunkwise = ChunkwisePolicy(engine, self.options.chunk_frames,
                                             self.options.left_chunks, self.options.max_streams)
            self.chunkwise.check_options(self.options)
            return
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
        self.options.validate(self.window_s)

    @property
    def sample_rate(self) -> int:
        return self.engine.sample_rate

    def create_stream(self, options: StreamOptions | None = None) -> Stream:
        options = options or self.options
        if self.chunkwise is not None:
            stream = Stream(self.sample_rate, options, next(self._ids))
            self.chunkwise.open(stream)
            return stream
        options.validate(self.window_s)
        return Stream(self.sample_rate, options, next(self._ids))

    def close(self, stream: Stream) -> None:
        """Release a stream's runtime state (chunk-wise runtimes hold slots and K/V pages)."""
        if self.chunkwise is not None:
            self.chunkwise.close(stream)

    def is_ready(self, stream: Stream) -> bool:
        if self.chunkwise is not None:
            return self.chunkwise.is_ready(stream)
        return redecode.next_job(stream) is not None

    def decode_streams(self, streams: Iterable[Stream]) -> None:
        """One step for every ready stream: re-decoded buffers in one batched engine pass, or
        one chunk of every chunk-wise stream in one runtime step."""
        if self.chunkwise is not None:
            self.chunkwise.decode_streams(list(streams))
            return
        jobs = [j for j in (redecode.next_job(s) for s in streams) if j is not None]
        decoding = {}
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
        for j in jobs:
            words = []
            rid = next((r for r, jj in decoding.items() if jj is j), None)
            if rid is not None:
                out = outs[rid]
                if out.error:
                    raise RuntimeError(f"stream {j.stream.id}: {out.error}")
                words = redecode.words_on_clock(j.stream, out.words, j.end)
            redecode.apply(j, words)

    def get_result(self, stream: Stream) -> StreamResult:
        if self.chunkwise is not None:
            return self.chunkwise.result(stream)
        return redecode.partial_result(stream)

    def is_endpoint(self, stream: Stream) -> bool:
        """The current utterance has ended: ``get_result`` is its final until ``reset``."""
        return stream.final is not None

    def reset(self, stream: Stream) -> None:
        """Start the next utterance: after an endpoint, where the final ended; otherwise the
        current utterance's words are dropped and the next starts at the decoded head."""
        if stream.final is not None:
            stream.start_utterance(stream.final_end)
        elif self.chunkwise is not None:
            self.chunkwise.drop_utterance(stream)
        else:
            stream.hypotheses.previous = []
            stream.start_utterance(stream.decoded_head)

    def is_done(self, stream: Stream) -> bool:
        """Input finished and everything decoded into finals."""
        return stream.flushed and stream.final is None
