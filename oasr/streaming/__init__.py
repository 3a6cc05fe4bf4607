"""Streaming recognition: the stream API (``StreamingRecognizer``), endpointing, the re-decode
policy for fixed-window models and the speech-detector seam."""

from oasr.streaming.agreement import HypothesisBuffer, Word
from oasr.streaming.detector import EnergySpeechDetector, FrameSpeechDetector
from oasr.streaming.endpoint import Endpoint, EndpointConfig, Endpointer, EndpointRule
from oasr.streaming.recognizer import StreamingRecognizer
from oasr.streaming.stream import Stream, StreamOptions, StreamResult, StreamStats

__all__ = ["EndpointConfig", "EndpointRule", "Endpoint", "Endpointer", "EnergySpeechDetector",
           "FrameSpeechDetector", "HypothesisBuffer", "Stream", "StreamOptions", "StreamResult",
           "StreamStats", "StreamingRecognizer", "Word"]
