"""The speech detector behind the streams: one ``StreamingVadPool`` per detector a recognizer's
streams name (``StreamOptions.detector``: ``energy``, ``silero``, any registered detector that
serves the ``stream`` role from audio), built once (weights loaded once) and shared.

Audio a stream accepts waits, undetected, until the recognizer's ``decode_streams``; there
``detect`` takes the whole new frames of every stream it was given and sends them through their
pool in one batched detector call (each stream's state kept by the pool), then each stream's
endpointer turns its probabilities into speech runs and endpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from oasr.streaming.stream import Stream
from oasr.vad.stream import StreamingVadPool, stream_detector_names


class DetectorPools:
    """The pools of one recognizer, by (detector name, weights folder), at its sample rate."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._pools: dict[tuple[str, str | None], StreamingVadPool] = {}

    def get(self, name: str, model_dir: str | Path | None = None) -> StreamingVadPool:
        """The pool for detector ``name``, built on first use.

        Raises:
            ValueError: an unknown name, or a detector that cannot endpoint a stream from its
                audio (FSMN-VAD: no ``stream`` role), naming the ones that can.
            MissingWeightsError: the detector's weights are not installed (names the fix).
        """
        key = (name, None if model_dir is None else str(model_dir))
        if key not in self._pools:
            self._pools[key] = build_pool(name, self.sample_rate, model_dir)
        return self._pools[key]


def build_pool(name: str, sample_rate: int,
               model_dir: str | Path | None = None) -> StreamingVadPool:
    from oasr.vad import VADS, build_detector

    usable = stream_detector_names()
    if name not in VADS:
        raise ValueError(f"unknown speech detector {name!r}; stream with one of: "
                         f"{', '.join(usable)}")
    if name not in usable:
        spec = VADS.get(name)
        raise ValueError(f"speech detector {name!r} has no streaming mode from audio (it "
                         f"declares {list(spec.modes)}, reads {spec.consumes!r}); stream with "
                         f"{' or '.join('--vad ' + n for n in usable)}")
    detector = build_detector(name, mode="stream", model_dir=model_dir)
    return StreamingVadPool(detector, VADS.get(name), sample_rate)


def detect(streams: Iterable[Stream]) -> None:
    """Every stream's whole undetected frames through its detector: one call per pool."""
    by_pool: dict[int, tuple[StreamingVadPool, list[Stream]]] = {}
    for s in streams:
        if s.undetected_frames:
            by_pool.setdefault(id(s.detector), (s.detector, []))[1].append(s)
    for pool, group in by_pool.values():
        probs = pool.probabilities({s.id: s.take_undetected() for s in group})
        for s in group:
            s.add_speech_probabilities(probs[s.id])
