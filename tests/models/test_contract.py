"""Every registered architecture, built tiny on CPU, against the model contract.

Keyed off ``list_models()`` through ``tiny_configs``: a new architecture with no tiny config
fails here. For each: it is a ``BaseAsrModel`` over a ``BaseEncoder``; every family it declares
is a registered decode strategy whose ``CAPABILITIES`` members the built model has; its
encoder's introspection is well-formed and consistent with its streaming kind; its
quantization layout names real ``QuantizableGemm`` layers.
"""

from __future__ import annotations

import pytest

from oasr.engine.decode import DECODE_STRATEGIES
from oasr.layers import QuantizableGemm
from oasr.models.base import (
    STREAMING_KINDS,
    BaseAsrModel,
    BaseDecoder,
    BaseEncoder,
    StreamingStateSpec,
    check_streaming_declaration,
)
from oasr.models.interfaces import CAPABILITIES, missing_members
from oasr.models.registry import get_model_entry, list_models
from tests.models.tiny_configs import build_tiny, uncovered

NAMES = [e.name for e in list_models()]


def test_every_registered_architecture_has_a_tiny_config():
    assert NAMES, "no architecture is registered"
    missing = uncovered(NAMES)
    assert not missing, f"add a tiny config to tests/models/tiny_configs.py for: {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_architecture_serves_every_family_it_declares(name):
    model, _ = build_tiny(name)
    assert isinstance(model, BaseAsrModel) and isinstance(model.encoder, BaseEncoder)
    families = type(model).decode_families
    assert families, f"{name} declares no decode_families"
    assert get_model_entry(name).decode_families == families  # declared once, read here
    assert model.default_decode_type == families[0]
    for family in families:
        assert family in CAPABILITIES and family in DECODE_STRATEGIES, family
        assert missing_members(model, family) == [], (name, family)


@pytest.mark.parametrize("name", NAMES)
def test_encoder_introspection_is_well_formed(name):
    enc = build_tiny(name)[0].encoder
    assert isinstance(enc.subsampling_rate, int) and enc.subsampling_rate >= 1
    assert isinstance(enc.right_context, int) and enc.right_context >= 0
    assert enc.streaming_kind in STREAMING_KINDS
    assert check_streaming_declaration(enc) == []
    for specs in (enc.streaming_state_specs, enc.slot_state_specs):
        assert all(isinstance(s, StreamingStateSpec) for s in specs)
    if enc.streaming_kind in ("slot", "stateful"):
        assert enc.streaming_chunk_frames and enc.streaming_chunk_frames >= 1
    if enc.streaming_kind != "none":
        geometry = enc.streaming_geometry(enc.streaming_chunk_frames or 16)
        assert geometry is None or geometry.window >= geometry.stride >= 1


@pytest.mark.parametrize("name", NAMES)
def test_model_surface_is_well_formed(name):
    model, _ = build_tiny(name)
    modules = dict(model.named_modules())
    for group in model.quantization_layout():
        assert group.members, group.name
        for path in group.members:
            assert isinstance(modules.get(path), QuantizableGemm), (group.name, path)
    assert isinstance(model.encoder_options(), dict)
    decoder = getattr(model, "decoder", None)  # an encoder-only (CTC) model may have none
    if isinstance(decoder, BaseDecoder):
        assert isinstance(decoder.supports_step_graphs, bool)
        if decoder.supports_step_graphs:
            assert decoder.cache_spec is not None, "step graphs need paged KV, so a cache_spec"
