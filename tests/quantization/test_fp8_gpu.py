"""fp8 on an sm_89+ GPU (Ada, Hopper): the scaled-mm lane's GEMM against bf16, Whisper
tiny.en end to end against its bf16 engine, and a pre-quantized fp8 bundle reloaded on the GPU.

Skipped without such a GPU (the CPU tests hold the lane's arithmetic to its float64 reference
through torch's CPU ``_scaled_mm``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from oasr.layers.linear import Linear
from oasr.quantization.lanes import ScaledMMFp8Lane
from oasr.quantization.methods import replace_weight
from oasr.quantization.numerics import quantize_weight_fp8
from tests.helpers.real_tiny_en import needs_tiny_en


def _sm89() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _sm89(), reason="needs a CUDA GPU of sm_89 or newer")]

# e4m3 keeps 3 mantissa bits: rounding each operand to it costs ~3.6% rms relative error, so a
# product of two such operands ~5% rms of the output; bf16 (8 bits) ~0.3%.
FP8_GEMM_REL_ERR = 0.07
BF16_GEMM_REL_ERR = 0.01
# Whisper tiny.en, 40 held-out LibriSpeech test-other utterances (~700 words; one word is
# ~0.14 points): fp8's WER may differ from bf16's by at most this many points.
FP8_WER_DELTA_POINTS = 1.0
HELDOUT_SPEAKERS = ("3005", "3080", "3331", "367")  # benchmarks/speaker_halves.py
MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "librispeech-test-other-70.parquet"


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("m,k,n", [(64, 384, 1536),        # tiny.en fc1, one short batch
                                   (4096, 1280, 5120),     # large-v3-turbo fc1
                                   (8192, 5120, 1280)])    # ... fc2
def test_fp8_gemm_against_bf16(m, k, n):
    torch.manual_seed(0)
    layer = Linear(k, n, bias=True).cuda()
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    x = torch.randn(m, k, device="cuda")
    x[:, 3] *= 20.0  # an outlier channel, as transformer activations have
    exact = torch.nn.functional.linear(x.double(), weight.double(), bias.double())
    bf16 = torch.nn.functional.linear(x.bfloat16(), weight.bfloat16(), bias.bfloat16())

    q, scale = quantize_weight_fp8(weight)
    replace_weight(layer, q, scale)
    lane = ScaledMMFp8Lane()
    assert lane.unavailable("cuda") is None
    lane.prepare(layer)
    y = lane.matmul(layer, x.bfloat16())
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    # The kernel computes what the lane's float64 reference says (up to its bf16 output).
    ref = lane.reference(layer, x.bfloat16())
    torch.testing.assert_close(y.float(), ref.float(), rtol=1e-2, atol=1e-2 * ref.abs().max())
    assert _rel_err(bf16, exact) < BF16_GEMM_REL_ERR
    assert _rel_err(y, exact) < FP8_GEMM_REL_ERR


@pytest.fixture(scope="module")
def heldout_clips():
    from oasr.bench.runner import read_clips

    clips = read_clips(str(MANIFEST), 16000)
    clips = [c for c in clips if c.id.split("-")[0] in HELDOUT_SPEAKERS]
    assert len(clips) == 40
    return clips


def _wer(quantization: str | None, clips) -> tuple[float, object]:
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.metrics.wer import score
    from oasr.models.loader import load_pretrained

    engine = ASREngine(EngineConfig(device="cuda", dtype="bf16", max_batch_size=len(clips),
                                    quantization=quantization), loaded=load_pretrained(None))
    texts = {o.request_id: o.text for o in engine.run(Request(c.id, c.audio) for c in clips)}
    return score({c.id: c.text for c in clips}, texts).wer * 100, engine


@needs_tiny_en
def test_whisper_tiny_en_fp8_wer_within_delta_of_bf16(heldout_clips):
    bf16_wer, _ = _wer(None, heldout_clips)
    fp8_wer, engine = _wer("fp8", heldout_clips)
    report = engine.quantization
    assert report.lane == "scaled-mm"
    # Every encoder and decoder block GEMM is served in fp8; the output head stays in float.
    assert any(p.startswith("encoder.") for p in report.quantized)
    assert any(p.startswith("decoder.") for p in report.quantized)
    assert "decoder.proj_out" in report.kept
    assert bf16_wer < 25.0  # tiny.en on test-other: the engine itself is sound
    assert abs(fp8_wer - bf16_wer) <= FP8_WER_DELTA_POINTS, (bf16_wer, fp8_wer)


def test_a_prequantized_fp8_bundle_loads_on_the_gpu(tmp_path):
    from safetensors.torch import load_file

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.models.bundle import read_bundle
    from oasr.models.loader import load_pretrained
    from oasr.quantization import QuantizationSpec
    from oasr.quantization.export import write_quantized_bundle
    from tests.transcribe.conftest import write_tiny_bundle

    float_bundle = write_tiny_bundle(tmp_path / "tiny", window_s=6.0)
    report = write_quantized_bundle(float_bundle, tmp_path / "q", QuantizationSpec("fp8"))
    assert report.quantized
    loaded = load_pretrained(str(tmp_path / "q"))
    engine = ASREngine(EngineConfig(device="cuda", dtype="bf16", max_new_tokens=8),
                       loaded=loaded)
    assert engine.quantization.quantized == list(report.quantized)
    stored = load_file(str(read_bundle(tmp_path / "q").weights_path))
    for path in report.quantized:
        layer = engine.model.get_submodule(path)
        assert layer.qweight.dtype == torch.float8_e4m3fn
        assert torch.equal(layer.qweight.cpu().view(torch.uint8),
                           stored[f"{path}.qweight"].view(torch.uint8)), path
