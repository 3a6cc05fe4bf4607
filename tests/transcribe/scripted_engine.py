"""A scripted stand-in for ``ASREngine``: synthetic "words" are bursts of sound, and what each
request decodes is decided by a script, so a test can make a window skip speech.

A recording is built by :func:`burst_audio`: word ``k`` is a burst of noise whose amplitude
encodes ``k`` (``level(k)``) over a quiet floor. :class:`ScriptedEngine` finds the bursts in a
request's audio and names each ``w<k>`` with its times in the request, as a decoder with word
timings would; ``hears(request, k)`` (the script) says which of them the decode keeps. A burst
the request's audio cuts is decoded as a fragment ``w<k>~``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace

import numpy as np

from oasr.engine.request import DecodingOptions, Request, RequestOutput, WordTiming
from oasr.transcribe.vad_segments import VadRecording

SR = 16000
FLOOR = 1e-4


def level(k: int) -> float:
    return 0.05 + 0.01 * k


def burst_audio(bursts: list[tuple[float, float]], seconds: float,
                seed: int = 0) -> np.ndarray:
    """``seconds`` of a quiet floor with burst ``k`` over ``bursts[k]`` (start, end)."""
    rng = np.random.default_rng(seed)
    audio = FLOOR * rng.standard_normal(int(seconds * SR))
    for k, (a, b) in enumerate(bursts):
        i, j = int(a * SR), int(b * SR)
        audio[i:j] = level(k) * np.sign(rng.standard_normal(j - i))
    return audio.astype(np.float32)


def find_bursts(audio: np.ndarray) -> list[tuple[int, float, float, bool]]:
    """(k, start, end, whole) of each burst in ``audio``: whole is False where the audio's
    edge cuts it."""
    loud = np.abs(audio) > 0.02
    edges = np.diff(np.concatenate(([0], loud.astype(np.int8), [0])))
    out = []
    for i, j in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
        k = int(round((float(np.abs(audio[i:j]).mean()) - 0.05) / 0.01))
        whole = 0 < i and j < len(audio)
        out.append((k, i / SR, j / SR, whole))
    return out


class ScriptedEngine:
    """What ``Transcriber`` asks of an engine, decoding by script (module docstring).
    ``requests`` records every request in the order submitted."""

    sample_rate = SR

    def __init__(self, hears: Callable[[Request, int], bool], window_s: float = 10.0,
                 incremental: bool = True) -> None:
        self.hears = hears
        self.inputs = SimpleNamespace(config=SimpleNamespace(fixed_window_seconds=window_s))
        self.config = SimpleNamespace(max_batch_size=4)
        # incremental: plays a label-synchronous family (Whisper's), whose skipped speech
        # is decoded again; False plays a frame-synchronous one.
        self.strategy = SimpleNamespace(validate_options=self._validate, incremental=incremental)
        self.tokenizer = None  # takes no prompt
        self.requests: list[Request] = []

    @staticmethod
    def _validate(options: DecodingOptions) -> None:
        if options.timestamps or options.prompt:
            raise ValueError("the scripted engine has no timestamp mode and takes no prompt")

    def decode(self, request: Request) -> RequestOutput:
        words = []
        for k, start, end, whole in find_bursts(request.audio):
            if self.hears(request, k):
                words.append(WordTiming(f"w{k}" if whole else f"w{k}~", start, end, 0.9))
        text = " ".join(w.word for w in words)
        return RequestOutput(request.request_id, text=text, token_ids=list(range(len(words))),
                             finish_reason="stop", words=words, avg_logprob=-0.2,
                             no_speech_prob=0.01, metadata=request.metadata)

    def run(self, requests: Iterable[Request | None]) -> Iterator[RequestOutput]:
        pending: list[Request] = []
        for request in requests:
            if request is not None:
                self.requests.append(request)
                pending.append(request)
                continue
            if not pending:
                raise RuntimeError("nothing to decode")
            yield self.decode(pending.pop(0))
        while pending:
            yield self.decode(pending.pop(0))


class FixedSegmenter:
    """A presegmenter that returns the given segments and speech whatever the audio."""

    def __init__(self, segments, speech):
        self.segments, self.speech_spans = segments, speech

    def batch(self, audios, sample_rate, max_segment_s):
        return [VadRecording(self.segments, len(a) / sample_rate, self.speech_spans)
                for a in audios]
