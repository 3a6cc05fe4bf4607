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

How the model streams is its ``StreamPolicy`` (``oasr.streaming.policy``), chosen once here:
chunk-wise through the encoder's streaming runtime and the decode family's streaming session,
or re-decode for a fixed-window model (Whisper). The speech detector runs when a stream's
trace is needed (``is_ready``, ``decode_streams``): one batched call over the new audio of every
open stream (``oasr.streaming.detector``).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable

from oasr.engine.engine import ASREngine
from oasr.streaming.detector import DetectorPools, detect
from oasr.streaming.policy import StreamPolicy, choose_policy
from oasr.streaming.stream import Stream, StreamOptions, StreamResult


class StreamingRecognizer:
    """Streams decoded through one engine; ``decode_streams`` batches them."""

    def __init__(self, engine: ASREngine, options: StreamOptions | None = None) -> None:
        self.engine = engine
        self.options = options or StreamOptions()
        self.policy: StreamPolicy = choose_policy(engine, self.options)
        self.detectors = DetectorPools(self.sample_rate)
        self.detectors.get(self.options.detector, self.options.detector_model_dir)
        self._ids = itertools.count()
        self._open: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()

    @property
    def sample_rate(self) -> int:
        return self.engine.sample_rate

    def create_stream(self, options: StreamOptions | None = None) -> Stream:
        options = options or self.options
        pool = self.detectors.get(options.detector, options.detector_model_dir)
        stream = Stream(self.sample_rate, options, next(self._ids), pool)
        self.policy.open(stream)
        pool.open(stream.id)
        self._open[stream.id] = stream
        return stream

    def close(self, stream: Stream) -> None:
        """Release a stream's state (its detector state; chunk-wise runtimes hold slots and
        K/V pages)."""
        self.policy.close(stream)
        stream.detector.close(stream.id)
        self._open.pop(stream.id, None)

    def is_ready(self, stream: Stream) -> bool:
        """A decode is due (``step_s`` of new audio, a chunk window, an endpoint within reach,
        the input's end); False while a final waits for ``reset``."""
        detect(list(self._open.values()))
        return self.policy.is_ready(stream)

    def decode_streams(self, streams: Iterable[Stream]) -> None:
        """One step for every ready stream: re-decoded buffers in one batched engine pass, or
        one chunk of every chunk-wise stream in one runtime step."""
        detect(list(self._open.values()))
        self.policy.decode(list(streams))

    def get_result(self, stream: Stream) -> StreamResult:
        return self.policy.result(stream)

    def is_endpoint(self, stream: Stream) -> bool:
        """The current utterance has ended: ``get_result`` is its final until ``reset``."""
        return stream.final is not None

    def reset(self, stream: Stream) -> None:
        """Start the next utterance: after an endpoint, where the final ended; otherwise the
        current utterance's words are dropped and the next starts at the decoded head."""
        self.policy.reset(stream)

    def is_done(self, stream: Stream) -> bool:
        """Input finished and everything decoded into finals."""
        return stream.flushed and stream.final is None
