"""The streaming-runtime axis reads the encoder's declared kind and checks its surface."""

from __future__ import annotations

import pytest

from oasr.engine.streaming_backend import (
    STREAMING_BACKENDS,
    StreamingEncoderBackend,
    build_streaming_backend,
    register_streaming_backend,
)
from oasr.models.base import BaseEncoder


class _Model:
    def __init__(self, encoder: BaseEncoder) -> None:
        self.encoder = encoder


class PagedEncoder(BaseEncoder):
    streaming_kind = "paged"

    def forward_chunk_paged(self, *args):
        return args

    def output_lengths(self, lengths):
        return lengths


class HollowPagedEncoder(BaseEncoder):
    streaming_kind = "paged"  # claims a kind it has no chunk forward for


def test_none_and_an_inconsistent_declaration_are_refused():
    with pytest.raises(ValueError, match="streaming_kind='none'"):
        build_streaming_backend(_Model(BaseEncoder()))
    with pytest.raises(ValueError, match="HollowPagedEncoder declares streaming_kind='paged' "
                                         "but lacks: forward_chunk_paged"):
        build_streaming_backend(_Model(HollowPagedEncoder()))


def test_a_consistent_encoder_gets_the_backend_of_its_kind():
    real = STREAMING_BACKENDS.get("paged")  # the built-in one stands aside for the test
    STREAMING_BACKENDS.unregister("paged")

    @register_streaming_backend("paged")
    class Fake(StreamingEncoderBackend):
        pass

    try:
        model = _Model(PagedEncoder())
        backend = build_streaming_backend(model)
        assert isinstance(backend, Fake) and backend.model is model
    finally:
        STREAMING_BACKENDS.unregister("paged")
        STREAMING_BACKENDS.register("paged", real)
