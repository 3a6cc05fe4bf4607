"""apply_quantization on every registered architecture (tiny, CPU), and its guarantees."""

from __future__ import annotations

import pytest
import torch

from oasr import ops
from oasr.quantization import QuantizationSpec, apply_quantization
from oasr.quantization.apply import quantization_of
from tests.models.tiny_configs import TINY_CONFIGS, build_tiny


@pytest.mark.parametrize("method", ["int8", "int8-weight"])
@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_every_architecture_runs_quantized_with_the_default_selection(name, method):
    # Catches a path that reads a quantized layer's float weight directly.
    torch.manual_seed(0)
    model, exercise = build_tiny(name)
    report = apply_quantization(model, method, "cpu")
    assert report is not None and report.quantized
    assert all(model.get_submodule(p).quant_method is not None for p in report.quantized)
    base = ops.snapshot()
    with torch.no_grad():
        exercise(model)
    lane = report.lane
    assert ops.counts_since(base).get(("quantized", f"{method}:{lane}"), 0) > 0


def test_none_does_nothing_and_reports_none():
    model, _ = build_tiny("whisper")
    assert apply_quantization(model, "none") is None and quantization_of(model) is None


def test_a_model_is_quantized_once():
    model, _ = build_tiny("whisper")
    first = apply_quantization(model, "int8", "cpu")
    assert apply_quantization(model, QuantizationSpec("int8"), "cpu") is first
    with pytest.raises(ValueError, match="already quantized .*load it again"):
        apply_quantization(model, "int8-weight", "cpu")


def test_the_report_records_layers_and_memory():
    model, _ = build_tiny("qwen2_audio")
    report = apply_quantization(model, "int8-weight", "cpu")
    assert report.spec.layers == tuple(report.quantized) and report.spec.lane == "dequant"
    assert "decoder.lm_head" in report.kept
    assert report.bytes_after < report.bytes_before
    assert "layers quantized" in report.summary()
    assert report.to_dict()["spec"]["method"] == "int8-weight"


def test_fp8_on_the_cpu_is_refused_before_any_layer_changes():
    from oasr.quantization.methods import QuantizationUnavailable

    model, _ = build_tiny("whisper")
    with pytest.raises(QuantizationUnavailable, match="fp8 runs on CUDA"):
        apply_quantization(model, "fp8", "cpu")
    assert quantization_of(model) is None
    assert all(getattr(m, "quant_method", None) is None for m in model.modules())
