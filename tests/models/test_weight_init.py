"""``skip_weight_init``: a model built without initialisers and loaded strictly equals the model
it was loaded from, every parameter and buffer; the initialisers come back afterwards."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr.models.registry import get_model_entry, list_models
from oasr.models.weight_init import skip_weight_init
from tests.models.tiny_configs import TINY_CONFIGS


@pytest.mark.parametrize("name", sorted(m.name for m in list_models()))
def test_skipped_init_then_strict_load_equals_the_source(name: str) -> None:
    config, _ = TINY_CONFIGS[name]()
    cls = get_model_entry(name).load_model_cls()
    torch.manual_seed(0)
    source = cls.from_config(config).eval()
    with skip_weight_init():
        built = cls.from_config(config)
    built.load_weights(source.state_dict(), strict=True)
    built.eval()
    want = dict(source.named_parameters()) | dict(source.named_buffers())
    got = dict(built.named_parameters()) | dict(built.named_buffers())
    assert want.keys() == got.keys()
    for key, tensor in want.items():
        assert torch.equal(got[key], tensor), key


def test_initialisers_are_skipped_inside_and_restored_after() -> None:
    original = nn.init.kaiming_uniform_
    t = torch.zeros(4, 4)
    with skip_weight_init():
        nn.Linear(4, 4)  # constructs without drawing
        nn.init.normal_(t)
        assert torch.equal(t, torch.zeros(4, 4))
    assert nn.init.kaiming_uniform_ is original
    nn.init.normal_(t)
    assert not torch.equal(t, torch.zeros(4, 4))


def test_restored_after_an_error() -> None:
    original = nn.init.normal_
    with pytest.raises(RuntimeError), skip_weight_init():
        raise RuntimeError("boom")
    assert nn.init.normal_ is original


def test_a_missing_weight_is_refused_by_the_strict_load() -> None:
    name = sorted(m.name for m in list_models())[0]
    config, _ = TINY_CONFIGS[name]()
    cls = get_model_entry(name).load_model_cls()
    state = cls.from_config(config).state_dict()
    state.pop(next(iter(state)))
    with skip_weight_init():
        built = cls.from_config(config)
    with pytest.raises(ValueError, match="missing"):
        built.load_weights(state, strict=True)
