"""The contract's bases: the definition-time capability check, unimplemented members, the
streaming declaration and the registry's requirement of a ``BaseAsrModel``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from oasr.models.base import (
    BaseAsrModel,
    BaseDecoder,
    BaseEncoder,
    Joiner,
    TransducerPredictor,
    check_streaming_declaration,
)
from oasr.models.interfaces import MissingCapabilityError, missing_members, require_capability
from oasr.models.registry import ModelEntry
from oasr.models.whisper.config import WhisperConfig


class StepOnlyDecoder(BaseDecoder):
    def step(self, tokens, state):
        return tokens


class FullDecoder(StepOnlyDecoder):
    def prefill(self, enc, prompt, capacity, enc_lens=None, pool=None):
        return enc, None

    def select(self, state, idx):
        return state

    def forced_logits(self, enc, tokens):
        return enc


@dataclass
class CtcConfig:
    blank_id: int = 0


def test_a_family_without_its_members_fails_at_class_definition_naming_them():
    with pytest.raises(MissingCapabilityError) as err:
        class NoDecoder(BaseAsrModel):  # the base annotates decoder as a BaseDecoder
            decode_families = ("aed",)

            def encode_offline(self, features, lengths=None):
                return features
    msg = str(err.value)
    assert "NoDecoder cannot serve decode family 'aed'" in msg
    for member in ("decoder.prefill", "decoder.step", "decoder.select"):
        assert member in msg
    assert "encode_offline" not in msg

    with pytest.raises(MissingCapabilityError, match=r"decoder\.prefill.*decoder\.select"):
        class HalfDecoder(BaseAsrModel):
            decode_families = ("aed",)
            decoder: StepOnlyDecoder

            def encode_offline(self, features, lengths=None):
                return features

    with pytest.raises(MissingCapabilityError, match=r"missing config\.blank_id"):
        class NoBlank(BaseAsrModel):
            decode_families = ("ctc",)

            def forward_offline(self, features, lengths):
                return features, lengths


def test_a_complete_class_defines_and_an_unknown_family_is_refused():
    class Aed(BaseAsrModel):
        decode_families = ("aed",)
        decoder: FullDecoder
        config: WhisperConfig

        def encode_offline(self, features, lengths=None):
            return features

    class Ctc(BaseAsrModel):
        decode_families = ("ctc",)
        config: CtcConfig

        def forward_offline(self, features, lengths):
            return features, lengths

    assert Ctc.decode_families == ("ctc",)
    model = Aed()
    model.decoder = FullDecoder()
    model.config = WhisperConfig()
    require_capability(model, "aed")
    assert model.default_decode_type == "aed"
    with pytest.raises(KeyError, match="valid: aed, ctc"):
        class Unknown(BaseAsrModel):
            decode_families = ("telepathy",)


def test_an_instance_with_base_stubs_only_is_missing_them():
    model = BaseAsrModel()
    model.decoder = StepOnlyDecoder()
    model.encode_offline = lambda features: features
    model.config = WhisperConfig()
    assert missing_members(model, "aed") == ["decoder.prefill", "decoder.select",
                                             "decoder.forced_logits"]
    with pytest.raises(NotImplementedError):
        BaseDecoder().prefill(torch.zeros(1), torch.zeros(1), 1)


def test_streaming_kind_is_checked_at_definition_and_against_the_surface():
    with pytest.raises(TypeError, match="streaming_kind='chunked'; valid: paged, slot"):
        class Bad(BaseEncoder):
            streaming_kind = "chunked"

    class Paged(BaseEncoder):
        streaming_kind = "paged"

    class Slot(BaseEncoder):
        streaming_kind = "slot"

        def get_streaming_init_states(self, batch):
            return []

        def streaming_forward(self, chunk, states):
            return chunk, states

    assert check_streaming_declaration(BaseEncoder()) == []
    assert check_streaming_declaration(Paged()) == [
        "forward_chunk_paged (streaming_kind='paged' needs it)",
        "output_lengths (streaming_kind='paged' needs it)"]
    assert check_streaming_declaration(Slot()) == [
        "slot_state_specs (a slot cache declares its tensors)"]
    enc = BaseEncoder()
    assert enc.subsampling_rate is None and enc.streaming_geometry(16) is None
    assert enc.streaming_state_specs == () and enc.fixed_attention_window is None


def test_transducer_protocols_default_to_the_loop():
    assert TransducerPredictor().stateless_tensors() is None
    assert Joiner().additive_tensors() is None
    for name in ("init_state", "predict", "advance", "stack_states", "unstack_states"):
        with pytest.raises(NotImplementedError):
            getattr(TransducerPredictor(), name)(*([None] * {"init_state": 2, "predict": 1,
                                                             "advance": 3, "stack_states": 1,
                                                             "unstack_states": 1}[name]))


def test_the_registry_requires_a_base_asr_model():
    entry = ModelEntry(name="plain", model_cls=torch.nn.Linear)
    with pytest.raises(TypeError, match="not a BaseAsrModel subclass"):
        entry.load_model_cls()
    with pytest.raises(TypeError, match="not a BaseAsrModel subclass"):
        _ = entry.decode_families


def test_an_entry_listing_families_answers_without_importing_and_must_match_the_class():
    class Ctc(BaseAsrModel):
        decode_families = ("ctc",)
        config: CtcConfig

        def forward_offline(self, features, lengths):
            return features, lengths

    lazy = ModelEntry(name="lazy", model_cls="no.such.module:Model", families=("ctc",))
    assert lazy.decode_families == ("ctc",)  # data: the missing module is never imported
    assert ModelEntry(name="ok", model_cls=Ctc, families=("ctc",)).load_model_cls() is Ctc
    with pytest.raises(TypeError, match=r"lists decode families \('aed',\) but Ctc declares"):
        ModelEntry(name="drift", model_cls=Ctc, families=("aed",)).load_model_cls()
