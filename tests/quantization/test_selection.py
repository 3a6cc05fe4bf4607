"""Per-layer selection by module path."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr.layers.conv import Conv1d
from oasr.layers.linear import Linear
from oasr.quantization import QUANT_METHODS, QuantizationSpec
from oasr.quantization.selection import DEFAULT_KEEP, select_layers


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = Conv1d(8, 16, 3, padding=1)
        self.encoder = nn.ModuleList([Linear(16, 16) for _ in range(2)])
        self.ctc = Linear(16, 10)
        self.proj_out = Linear(16, 10)


def _select(spec: QuantizationSpec):
    method = QUANT_METHODS.get(spec.method)(spec, "cpu")
    return select_layers(Net(), spec, method, "cpu")


def test_defaults_keep_heads_and_convs_in_float():
    sel = _select(QuantizationSpec("int8"))
    assert list(sel.chosen) == ["encoder.0", "encoder.1"]
    assert sel.kept["ctc"] == "excluded by 'ctc'"
    assert sel.kept["proj_out"] == "excluded by '*proj_out'"
    assert sel.kept["conv"].startswith("a conv layer")


def test_include_and_exclude_patterns_cross_dots():
    sel = _select(QuantizationSpec("int8", include=("encoder.*",), exclude=("*.1",)))
    assert list(sel.chosen) == ["encoder.0"]
    assert sel.kept["ctc"] == "not included"
    sel = _select(QuantizationSpec("int8", exclude=()))
    assert set(sel.chosen) == {"encoder.0", "encoder.1", "ctc", "proj_out"}


def test_a_recorded_layer_list_is_followed():
    sel = _select(QuantizationSpec("int8", layers=("ctc",)))
    assert list(sel.chosen) == ["ctc"]
    with pytest.raises(ValueError, match="does not have as quantizable layers"):
        _select(QuantizationSpec("int8", layers=("decoder.0",)))


def test_a_kind_the_method_does_not_serve_is_refused():
    with pytest.raises(ValueError, match="conv is a conv layer; int8 serves gemm"):
        _select(QuantizationSpec("int8", module_types=("conv",)))


def test_selecting_nothing_is_an_error_not_a_no_op():
    with pytest.raises(ValueError, match="selects no layer of Net"):
        _select(QuantizationSpec("int8", include=("decoder.*",)))


def test_a_lane_shape_refusal_keeps_the_layer_with_the_reason():
    spec = QuantizationSpec("fp8", exclude=())
    method = QUANT_METHODS.get("fp8")(spec, "cpu", offline=True)
    net = Net()
    net.encoder[1] = Linear(16, 20)  # 20 is no multiple of 16
    sel = select_layers(net, spec, method, "cuda")
    assert "multiple of 16" in sel.kept["encoder.1"] and "encoder.0" in sel.chosen


def test_default_keep_names_heads_of_every_family():
    # The paths the registered architectures give their output heads, CTC and joint layers.
    from fnmatch import fnmatchcase

    for path in ("decoder.proj_out", "decoder.lm_head", "decoder.output_layer", "ctc.ctc_lo",
                 "ctc", "ctc_head", "joint.out", "joiner.output_linear", "predictor.conv",
                 "decoder.left_decoder.output_layer"):
        assert any(fnmatchcase(path, p) for p in DEFAULT_KEEP), path
    torch.manual_seed(0)
