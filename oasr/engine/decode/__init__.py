"""Decode families (``oasr.engine.decode``): one registry axis, one strategy per paradigm."""

from oasr.engine.decode.base import DecodeStrategy
from oasr.engine.decode.registry import (
    DECODE_STRATEGIES,
    build_decode_strategy,
    register_decode_strategy,
)

__all__ = [
    "DecodeStrategy",
    "DECODE_STRATEGIES",
    "build_decode_strategy",
    "register_decode_strategy",
]
