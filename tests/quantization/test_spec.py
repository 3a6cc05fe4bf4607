"""QuantizationSpec and the switch's spellings (--quantization, --compute-type)."""

from __future__ import annotations

import pytest

from oasr.quantization.spec import (
    COMPUTE_TYPES,
    QuantizationSpec,
    parse_compute_type,
    parse_quantization,
    resolve_switches,
)


@pytest.mark.parametrize("name", ["int8", "int8-weight", "fp8", "INT8", "int8_weight"])
def test_method_names_parse(name):
    spec = parse_quantization(name)
    assert spec is not None and spec.method == name.lower().replace("_", "-")


@pytest.mark.parametrize("name", [None, "none", "", "None"])
def test_none_means_no_quantization(name):
    assert parse_quantization(name) is None


def test_unknown_name_lists_the_valid_ones_and_points_compute_types_elsewhere():
    with pytest.raises(ValueError, match="valid: int8, int8-weight, fp8, none"):
        parse_quantization("int4")
    with pytest.raises(ValueError, match="pass it as --compute-type"):
        parse_quantization("int8_float16")


@pytest.mark.parametrize("name,quant,dtype", [
    ("int8", "int8", "fp32"), ("int8_float16", "int8", "fp16"),
    ("int8_bfloat16", "int8", "bf16"), ("float16", "none", "fp16"),
    ("float32", "none", "fp32"), ("default", "none", "auto"), ("auto", "none", "auto"),
])
def test_compute_types_map_to_a_method_and_a_dtype(name, quant, dtype):
    ct = parse_compute_type(name)
    assert (ct.quantization, ct.dtype) == (quant, dtype)


def test_compute_type_refusals_say_why():
    with pytest.raises(ValueError, match="no int16 method"):
        parse_compute_type("int16")
    with pytest.raises(ValueError, match="valid: default, auto"):
        parse_compute_type("int3")


def test_every_compute_type_names_a_known_method():
    for ct in COMPUTE_TYPES.values():
        assert ct.quantization == "none" or parse_quantization(ct.quantization) is not None


def test_switches_resolve_and_refuse_contradictions():
    assert resolve_switches(None, None, "auto") == ("none", "auto")
    assert resolve_switches("int8", None, "fp32") == ("int8", "fp32")
    assert resolve_switches(None, "int8_float16", "auto") == ("int8", "fp16")
    assert resolve_switches("int8", "int8", "fp32") == ("int8", "fp32")
    with pytest.raises(ValueError, match="--compute-type float16 means quantization none"):
        resolve_switches("int8", "float16")
    with pytest.raises(ValueError, match="means dtype fp16, but --dtype fp32"):
        resolve_switches(None, "int8_float16", "fp32")


def test_spec_round_trips_through_a_dict():
    spec = QuantizationSpec(method="int8", algorithm="smoothquant", exclude=("a.*",),
                            layers=("x", "y"), smoothing_alpha=0.6, calibration="m.parquet")
    back = QuantizationSpec.from_dict(spec.to_dict())
    assert back == spec
    assert QuantizationSpec.from_dict(QuantizationSpec("fp8").to_dict()).exclude is None


def test_a_spec_from_a_newer_oasr_is_refused_naming_the_field():
    data = QuantizationSpec("int8").to_dict() | {"group_size": 128}
    with pytest.raises(ValueError, match=r"unknown fields \['group_size'\]"):
        QuantizationSpec.from_dict(data)


@pytest.mark.parametrize("kw,match", [
    ({"method": "none"}, "needs a method"),
    ({"method": "int8", "algorithm": "gptq"}, "algorithm 'gptq'"),
    ({"method": "int8", "module_types": ("lstm",)}, "module_types"),
    ({"method": "int8", "smoothing_alpha": 1.5}, "smoothing_alpha"),
    ({"method": "int8", "include": ()}, "selects nothing"),
])
def test_validate_names_the_bad_field(kw, match):
    with pytest.raises(ValueError, match=match):
        QuantizationSpec(**kw).validate()
