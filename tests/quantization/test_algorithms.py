"""absmax and SmoothQuant, with the smoothing groups models declare."""

from __future__ import annotations

import pytest
import torch

from oasr.quantization import QUANT_ALGORITHMS, QuantizationSpec, apply_quantization
from oasr.quantization.algorithms import smoothing_factors
from oasr.quantization.calibration import collect_stats
from tests.models.tiny_configs import build_tiny


def _calibrated_whisper():
    torch.manual_seed(0)
    model, exercise = build_tiny("whisper")
    paths = [p for p, m in model.named_modules()
             if getattr(m, "quant_kind", "") == "gemm"]
    with torch.no_grad():
        stats = collect_stats(model, paths, lambda: exercise(model), source="exercise")
    return model, exercise, stats


def test_stats_hold_each_layers_largest_input_per_channel():
    model, _, stats = _calibrated_whisper()
    fc1 = "encoder.layers.0.fc1"
    assert stats.absmax[fc1].shape == (model.config.d_model,)
    assert stats.rows[fc1] > 0 and (stats.absmax[fc1] >= 0).all()
    assert not model.encoder.layers[0].fc1._forward_pre_hooks  # hooks removed


def test_smoothing_is_shared_within_a_declared_group():
    model, _, stats = _calibrated_whisper()
    report = apply_quantization(model, QuantizationSpec("int8", algorithm="smoothquant"),
                                "cpu", stats=stats)
    pre = "encoder.layers.0.self_attn"
    q, k, v = (model.get_submodule(f"{pre}.{p}_proj").input_smooth for p in "qkv")
    assert torch.equal(q, k) and torch.equal(k, v)
    assert report.smoothed == len(report.quantized)


def test_smoothing_leaves_the_float_product_unchanged():
    w = torch.randn(12, 8)
    x = torch.randn(5, 8)
    x[:, 2] *= 30.0
    s = smoothing_factors(x.abs().amax(0), [w], alpha=0.5)
    torch.testing.assert_close((x / s) @ (w * s).t(), x @ w.t(), rtol=1e-5, atol=1e-4)
    # The smoothed input is flatter: its largest channel over its smallest shrinks.
    before = x.abs().amax(0)
    after = (x / s).abs().amax(0)
    assert after.max() / after.min() < before.max() / before.min()


def test_dead_channels_keep_a_factor_of_one():
    s = smoothing_factors(torch.tensor([0.0, 2.0]), [torch.tensor([[1.0, 0.0]])], 0.5)
    assert s.tolist() == [1.0, 1.0]


def test_smoothquant_is_closer_than_absmax_on_an_outlier_channel():
    # Per-tensor activation quantization (the CPU lane) suffers most from one loud channel.
    from oasr.layers.linear import Linear

    torch.manual_seed(0)
    x = torch.randn(64, 32)
    x[:, 5] *= 80.0
    errs = {}
    for algo in ("absmax", "smoothquant"):
        torch.manual_seed(1)
        net = torch.nn.Sequential(Linear(32, 24))
        want = net(x).detach()
        stats = collect_stats(net, ["0"], lambda n=net: n(x))
        apply_quantization(net, QuantizationSpec("int8", algorithm=algo, exclude=()), "cpu",
                           stats=stats)
        errs[algo] = (net(x) - want).abs().mean().item()
    assert errs["smoothquant"] < 0.5 * errs["absmax"], errs


def test_smoothquant_without_statistics_names_the_command():
    model, _ = build_tiny("whisper")
    with pytest.raises(ValueError, match="--algorithm smoothquant --calibration MANIFEST"):
        apply_quantization(model, QuantizationSpec("int8", algorithm="smoothquant"), "cpu")


def test_a_layer_the_calibration_never_reached_is_named():
    model, _, stats = _calibrated_whisper()
    del stats.absmax["encoder.layers.0.fc2"]
    with pytest.raises(ValueError, match=r"never ran \['encoder.layers.0.fc2'\]"):
        apply_quantization(model, QuantizationSpec("int8", algorithm="smoothquant"), "cpu",
                           stats=stats)


def test_every_algorithm_is_registered_under_its_name():
    for name in QUANT_ALGORITHMS.names():
        assert QUANT_ALGORITHMS.get(name).name == name
