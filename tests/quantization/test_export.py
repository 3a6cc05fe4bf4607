"""Pre-quantized bundles (format v2): written by write_quantized_bundle, loaded exactly."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from oasr.models.bundle import read_bundle
from oasr.models.loader import load_pretrained
from oasr.quantization import QuantizationSpec
from oasr.quantization.export import write_quantized_bundle
from tests.transcribe.conftest import clip, write_tiny_bundle

CLIP = "1688-142285-0000"


@pytest.fixture(scope="module")
def float_bundle(tmp_path_factory):
    return write_tiny_bundle(tmp_path_factory.mktemp("float") / "tiny", window_s=6.0)


def _tokens(engine: ASREngine, audio) -> list[int]:
    (out,) = list(engine.run([Request("r", audio)]))
    assert out.error is None, out.error
    return list(out.token_ids)


@pytest.mark.parametrize("method", ["int8", "int8-weight", "fp8"])
def test_a_quantized_bundle_reloads_to_the_same_quantized_weights(float_bundle, tmp_path,
                                                                  method):
    dst = tmp_path / "q"
    spec = QuantizationSpec(method, exclude=())  # the tied proj_out too
    report = write_quantized_bundle(float_bundle, dst, spec)
    bundle = read_bundle(dst)
    assert bundle.format_version == 2
    assert bundle.quantization["layers"] == list(report.quantized)
    stored = load_file(str(bundle.weights_path))
    if method == "fp8":  # the tiny vocabulary is no multiple of 16: fp8's GEMM refuses it
        assert "multiple of 16" in report.kept["decoder.proj_out"]
    else:
        assert "decoder.proj_out.qweight" in stored
    assert "encoder.layers.0.fc1.weight" not in stored
    if method == "fp8":
        return  # runs on sm_89+ only; tests/quantization/test_fp8_gpu.py loads it there
    loaded = load_pretrained(str(dst))
    assert loaded.quantization.spec.method == method
    engine = ASREngine(EngineConfig(device="cpu", max_new_tokens=8), loaded=loaded)
    assert engine.quantization.quantized == list(report.quantized)
    for path in report.quantized:
        layer = engine.model.get_submodule(path)
        assert torch.equal(layer.qweight, stored[f"{path}.qweight"]), path
        torch.testing.assert_close(layer.weight_scale, stored[f"{path}.weight_scale"],
                                   rtol=1e-6, atol=0)


def test_smoothquant_calibrates_on_audio_and_reloads_its_smoothing(float_bundle, tmp_path):
    audio_path = clip(CLIP)
    dst = tmp_path / "sq"
    report = write_quantized_bundle(float_bundle, dst,
                                    QuantizationSpec("int8", algorithm="smoothquant"),
                                    calibration=str(audio_path), calibration_rows=1)
    assert report.smoothed == len(report.quantized)
    recorded = read_bundle(dst).quantization
    assert recorded["algorithm"] == "smoothquant" and str(audio_path) in recorded["calibration"]
    stored = load_file(str(read_bundle(dst).weights_path))
    loaded = load_pretrained(str(dst))
    engine = ASREngine(EngineConfig(device="cpu", max_new_tokens=8), loaded=loaded)
    for path in report.quantized:
        layer = engine.model.get_submodule(path)
        assert torch.equal(layer.qweight, stored[f"{path}.qweight"]), path
        torch.testing.assert_close(layer.input_smooth, stored[f"{path}.input_smooth"],
                                   rtol=1e-6, atol=0)


def test_the_loaded_bundle_decodes_as_the_engine_quantizing_at_start_up(float_bundle, tmp_path):
    import soundfile as sf

    audio, _ = sf.read(clip(CLIP), dtype="float32")
    audio = audio[: 16000 * 5]
    dst = tmp_path / "q"
    write_quantized_bundle(float_bundle, dst, QuantizationSpec("int8"))
    prequantized = ASREngine(EngineConfig(device="cpu", max_new_tokens=8),
                             loaded=load_pretrained(str(dst)))
    at_start = ASREngine(EngineConfig(device="cpu", max_new_tokens=8, quantization="int8"),
                         loaded=load_pretrained(str(float_bundle)))
    assert _tokens(prequantized, audio) == _tokens(at_start, audio)


def test_refusals_name_the_fix(float_bundle, tmp_path):
    with pytest.raises(ValueError, match="needs --calibration MANIFEST"):
        write_quantized_bundle(float_bundle, tmp_path / "a",
                               QuantizationSpec("int8", algorithm="smoothquant"))
    with pytest.raises(ValueError, match="uses no calibration"):
        write_quantized_bundle(float_bundle, tmp_path / "b", QuantizationSpec("int8"),
                               calibration="x.parquet")
    write_quantized_bundle(float_bundle, tmp_path / "q", QuantizationSpec("int8"))
    with pytest.raises(ValueError, match="already quantized"):
        write_quantized_bundle(tmp_path / "q", tmp_path / "c", QuantizationSpec("int8"))
