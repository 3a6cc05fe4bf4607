"""Streaming recognition: the stream API (``StreamingRecognizer``), its two policies (re-decode
for fixed-window models, chunk-wise for streaming encoders) and the speech detector behind the
endpoints (``oasr.vad``: the detectors, the endpointer)."""

from oasr.streaming.agreement import HypothesisBuffer, Word
from oasr.streaming.policy import StreamPolicy
from oasr.streaming.recognizer import StreamingRecognizer
from oasr.streaming.stream import Stream, StreamOptions, StreamResult, StreamStats
from oasr.vad.endpointer import Endpoint, EndpointConfig, Endpointer, EndpointRule

__all__ = ["EndpointConfig", "EndpointRule", "Endpoint", "Endpointer", "HypothesisBuffer",
           "Stream", "StreamOptions", "StreamPolicy", "StreamResult", "StreamStats",
           "StreamingRecognizer", "Word"]
