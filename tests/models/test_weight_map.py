"""``WeightMap``: ordered rules rename, drop with a reason, reshape, and report what no rule
matched."""

from __future__ import annotations

import pytest
import torch

from oasr.models.weight_map import Rule, WeightMap, keep_unmatched, renames


def test_first_matching_rule_decides_and_unmatched_keys_are_reported_in_order():
    keys = WeightMap(
        Rule(r"model\.proj\.weight", reason="tied"),
        Rule(r"model\.layers\.(\d+)\.fc\.(weight|bias)", r"blocks.\1.ffn.\2"),
        Rule(r"model\.(.*)", r"\1"),
    )
    raw = {"model.proj.weight": 1, "model.layers.3.fc.bias": 2, "model.norm.weight": 3,
           "extra.x": 4, "other": 5}
    out, unmatched = keys.apply(raw)
    assert out.tensors == {"blocks.3.ffn.bias": 2, "norm.weight": 3}
    assert out.sources == {"blocks.3.ffn.bias": "model.layers.3.fc.bias",
                           "norm.weight": "model.norm.weight"}
    assert out.dropped == {"model.proj.weight": "tied"}
    assert unmatched == ["extra.x", "other"]


def test_only_sends_keys_our_model_lacks_to_unmatched():
    out, unmatched = WeightMap(Rule(r"m\.(.*)", r"\1")).apply({"m.a": 1, "m.b": 2}, only={"a"})
    assert out.tensors == {"a": 1} and unmatched == ["m.b"]


def test_renames_escapes_the_table_and_a_rule_may_reshape():
    keys = WeightMap(*renames({"a/b.c": "x.y"}, r"(enc|dec)/(\d+)/", r"\1.\2."),
                     Rule(r"w", r"w", tensor=lambda t: t.squeeze(-1)))
    out, unmatched = keys.apply({"enc/4/a/b.c": 1, "enc/4/aXb.c": 2, "w": torch.zeros(2, 3, 1)})
    assert out.tensors["enc.4.x.y"] == 1 and out.tensors["w"].shape == (2, 3)
    assert unmatched == ["enc/4/aXb.c"]  # the table's "/" and "." are literal


def test_translate_matches_another_layouts_name_and_unmatched_keys_can_be_kept_by_name():
    keys = WeightMap(Rule(r"hf\.(.*)", r"ours.\1"))
    raw = {"nemo.a": 1, "odd": 2}
    out, unmatched = keys.apply(raw, translate=lambda k: k.replace("nemo.", "hf."))
    assert out.tensors == {"ours.a": 1} and out.sources == {"ours.a": "nemo.a"}
    kept = keep_unmatched(raw, out, unmatched)
    assert kept.tensors == {"ours.a": 1, "odd": 2} and kept.sources["odd"] == "odd"


def test_two_keys_mapped_to_one_and_a_drop_without_reason_are_refused():
    with pytest.raises(ValueError, match="mapped twice"):
        WeightMap(Rule(r"(?:model\.)?(.*)", r"\1")).apply({"model.a": 1, "a": 2})
    with pytest.raises(ValueError, match="needs a reason"):
        Rule(r"x")
