"""``DictConfig``: every model config's JSON round trip, and the types JSON loses coming back."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

import pytest

from oasr.models.config_dict import DictConfig
from oasr.models.conformer.config import ConformerConfig
from oasr.models.fastconformer.config import FastConformerConfig
from oasr.models.nemotron_streaming.config import NemotronStreamingConfig
from oasr.models.paraformer.config import ParaformerConfig
from oasr.models.qwen2_audio.config import Qwen2AudioConfig
from oasr.models.whisper.config import WhisperConfig
from oasr.models.zipformer.config import ZipformerConfig


class Norm(enum.Enum):
    LAYER = "layer"
    BATCH = "batch"


@dataclass
class Inner(DictConfig):
    width: int = 4
    norm: Norm = Norm.LAYER


@dataclass
class Outer(DictConfig):
    inner: Inner = field(default_factory=Inner)
    strides: tuple[int, ...] = (1, 2)
    pairs: list[list[int]] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    slots: dict[int, str] = field(default_factory=dict)
    limit: int | None = None


def _json(data):
    return json.loads(json.dumps(data))


def test_nested_enums_tuples_and_keys_come_back_typed():
    cfg = Outer(Inner(8, Norm.BATCH), (2, 4), [(1, 2)], {"en": 3}, {5: "x"}, 7)
    data = cfg.to_dict()
    assert data["inner"] == {"width": 8, "norm": "batch"}
    assert data["pairs"] == [[1, 2]]  # tuples inside a list field are written as lists
    back = Outer.from_dict(_json(data))
    assert back.inner == Inner(8, Norm.BATCH)
    assert back.strides == (2, 4) and back.slots == {5: "x"} and back.limit == 7
    assert back.to_dict() == data


def test_unknown_fields_are_refused_by_name():
    with pytest.raises(ValueError, match="Outer does not have the fields: bogus, nope"):
        Outer.from_dict({"nope": 1, "bogus": 2})
    with pytest.raises(ValueError, match="Inner does not have the fields: x"):
        Outer.from_dict({"inner": {"x": 1}})


@pytest.mark.parametrize("cfg", [
    WhisperConfig(alignment_heads=[[1, 2]], lang_to_id={"en": 3}, task_to_id={"transcribe": 4}),
    ZipformerConfig(), FastConformerConfig(head="tdt"), NemotronStreamingConfig(),
    ConformerConfig(), ParaformerConfig(), Qwen2AudioConfig(),
], ids=lambda c: type(c).__name__)
def test_every_model_config_round_trips_through_json(cfg):
    data = cfg.to_dict()
    back = type(cfg).from_dict(_json(data))
    assert back == cfg and back.to_dict() == data


def test_zipformer_refuses_a_bundle_from_before_the_recorded_front_end():
    data = ZipformerConfig().to_dict()
    del data["decode_tail_pad_frames"]
    with pytest.raises(ValueError, match="convert the icefall checkpoint again"):
        ZipformerConfig.from_dict(data)
