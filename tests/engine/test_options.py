"""Per-family options: defaults -> overrides, typed from annotations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest

from oasr.engine.decode.options import option, parse_decode_option, resolve_options
from oasr.engine.request import DecodingOptions
from oasr.engine.step_budget import StepBudget


@dataclass
class FooOptions:
    beam_size: int = option(4, doc="Beam width.")
    nbest: Optional[int] = option(None, doc="N-best.")
    weight: float = option(0.5, doc="A weight.")
    fused: bool = option(True, doc="Use the fused path.")
    heads: tuple[int, ...] = option((1, 2), doc="Heads.")

    def validate(self) -> None:
        if self.beam_size < 1:
            raise ValueError("beam_size must be >= 1")


def test_resolution_order_and_typing():
    assert resolve_options(FooOptions).beam_size == 4
    opts = resolve_options(FooOptions, {"beam_size": "2", "nbest": "4", "weight": "0.25",
                                        "fused": "false", "heads": "3,5"})
    assert opts.beam_size == 2 and opts.nbest == 4 and isinstance(opts.nbest, int)
    assert opts.weight == 0.25 and opts.fused is False and opts.heads == (3, 5)
    assert resolve_options(FooOptions, {"nbest": "none"}).nbest is None


def test_unknown_key_names_the_valid_ones():
    with pytest.raises(KeyError, match="valid: beam_size, nbest, weight, fused, heads"):
        resolve_options(FooOptions, {"beam": "3"})


def test_bad_values_and_validate():
    with pytest.raises(ValueError, match="expected int"):
        resolve_options(FooOptions, {"beam_size": "wide"})
    with pytest.raises(ValueError, match="expected a boolean"):
        resolve_options(FooOptions, {"fused": "maybe"})
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        resolve_options(FooOptions, {"beam_size": "0"})


@pytest.mark.parametrize("key,value", [
    ("beam_size", 4.7), ("beam_size", True), ("beam_size", None), ("weight", False),
    ("fused", 1), ("heads", (1, 2.5)), ("heads", 3), ("nbest", 2.0),
])
def test_non_string_values_are_type_checked(key, value):
    # A Python value is checked against the annotation as a string is.
    with pytest.raises(ValueError, match=f"decode option {key}=.*expected"):
        resolve_options(FooOptions, {key: value})


def test_non_string_values_of_the_right_type_pass():
    opts = resolve_options(FooOptions, {"beam_size": 3, "weight": 1, "fused": False,
                                        "heads": [4], "nbest": None})
    assert opts.beam_size == 3 and opts.weight == 1.0 and isinstance(opts.weight, float)
    assert opts.fused is False and opts.heads == (4,) and opts.nbest is None


def test_family_without_options_refuses_overrides():
    assert resolve_options(None) is None
    with pytest.raises(KeyError, match="takes no options"):
        resolve_options(None, {"x": 1})


def test_parse_decode_option():
    assert parse_decode_option("beam_size=4") == ("beam_size", "4")
    assert parse_decode_option("prompt=a=b") == ("prompt", "a=b")
    with pytest.raises(ValueError, match="key=value"):
        parse_decode_option("beam_size")


def test_decoding_options_validate():
    DecodingOptions(temperature=0.5, top_k=5, top_p=0.9).validate()
    for bad in (dict(n_best=0), dict(top_p=1.5), dict(task="summarize"), dict(temperature=-1)):
        with pytest.raises(ValueError):
            DecodingOptions(**bad).validate()
    assert DecodingOptions(task="translate", language="es").set_selective() == ["task", "language"]
    assert DecodingOptions(prompt="context").set_selective() == ["prompt"]


def test_step_budget_step_cap_and_deadline():
    b = StepBudget.for_tick(3, 10_000)
    assert [b.take() for _ in range(5)] == [True, True, True, False, False]
    expired = StepBudget(100, deadline=0.0)
    assert expired.take() is True  # the first step of a tick is always granted
    assert expired.take() is False
