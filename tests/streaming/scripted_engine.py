"""An engine stand-in that 'recognizes' a scripted recording: the stream policy's test double.

The recording is low-level noise (-80 dBFS, silence to the energy gate) with louder noise
(-20 dBFS) under each scripted word. A request's audio is located in the recording by its first
samples (the noise is random, so the match is unique); the words wholly inside the request come
back with request-relative times, and a word the request cuts comes back garbled, as a model
decoding half a word would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from oasr.engine.request import Request, RequestOutput, WordTiming

SR = 16000


def scripted_audio(script: list[tuple[str, float, float]], seconds: float,
                   seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(int(seconds * SR)) * 1e-4).astype(np.float32)
    for _, a, b in script:
        i, j = int(a * SR), int(b * SR)
        x[i:j] = (rng.standard_normal(j - i) * 0.1).astype(np.float32)
    return x


@dataclass
class ScriptedEngine:
    audio: np.ndarray
    script: list[tuple[str, float, float]]
    passes: list[int] = field(default_factory=list)  # requests decoded per engine pass
    max_request_s: float = 0.0
    _queue: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sample_rate = SR
        self.model = SimpleNamespace(encoder=SimpleNamespace(streaming_kind="none"))
        self.inputs = SimpleNamespace(config=SimpleNamespace(fixed_window_seconds=30.0))
        # a family with offline word timings and no chunk-wise streaming session
        self.strategy = SimpleNamespace(name=None, word_timing_modes=("offline",),
                                        streaming_session=None)
        self.decode_method = "scripted"

    def add_request(self, request: Request) -> None:
        assert 0 < request.num_samples <= 30 * SR
        self._queue.append(request)

    def has_unfinished(self) -> bool:
        return bool(self._queue)

    def step(self) -> list[RequestOutput]:
        batch, self._queue = self._queue, []
        self.passes.append(len(batch))
        return [self._recognize(r) for r in batch]

    def _locate(self, audio: np.ndarray) -> int:
        head = audio[:32]
        hits = np.flatnonzero(self.audio[: len(self.audio) - 31] == head[0])
        for h in hits:
            if np.array_equal(self.audio[h:h + 32], head):
                return int(h)
        raise AssertionError("request audio is not from the recording")

    def _recognize(self, request: Request) -> RequestOutput:
        start = self._locate(request.audio) / SR
        end = start + request.num_samples / SR
        self.max_request_s = max(self.max_request_s, end - start)
        words = []
        for text, a, b in self.script:
            if a >= start - 0.01 and b <= end:
                words.append(WordTiming(text, a - start, b - start, 0.9))
            elif a < end < b:
                words.append(WordTiming(text[: max(1, len(text) // 2)] + "-", a - start,
                                        end - start, 0.2))
        return RequestOutput(request.request_id, text=" ".join(w.word for w in words),
                             words=words)
