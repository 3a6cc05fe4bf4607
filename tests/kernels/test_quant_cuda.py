"""``quantize_rows_fp8`` on the GPU (``quant_cuda``): the kernel against the torch statement
(``oasr.quantization.numerics.quantize_rows_fp8``), bit for bit, and the fp8 lane routed to it."""

from __future__ import annotations

import pytest
import torch

from oasr import ops
from oasr.kernels import quant_cuda
from oasr.quantization.numerics import FP8_MAX, quantize_rows_fp8

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_registered_for_the_quantize_rows_op() -> None:
    impl = ops.registered_kernels()["quantize_rows_fp8"].load()
    assert impl.fn is quant_cuda.quantize_rows_fp8 and impl.library.name == "quant_cuda"
    assert not quant_cuda.supports(torch.zeros(4, 16))  # CPU
    assert "quant-rows-layout" in ops.KERNEL_GAPS


def activations(rows: int, cols: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.rand(rows, 1, generator=g).mul(30)
    x[:, min(3, cols - 1)] *= 25.0  # an outlier channel
    if rows > 2:
        x[1] = 0.0  # a silent row: the tiny scale, zeros out
        x[2, 0] = 1e6  # a row whose absmax dwarfs the rest
    return x.to(dtype)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 16), (7, 384), (4097, 1536), (33, 5120), (5, 33)])
def test_kernel_equals_the_torch_statement(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = activations(*shape, dtype, seed=sum(shape)).cuda()
    q_ref, s_ref = quantize_rows_fp8(x)
    q, s = quant_cuda.quantize_rows_fp8(x)
    assert q.dtype == q_ref.dtype and q.shape == shape and s.shape == (shape[0], 1)
    torch.testing.assert_close(s, s_ref, rtol=0, atol=0)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    # fp16 holds no 1e6: that row is inf, its scale inf, and its values NaN and zeros, as torch's.
    assert q.float().nan_to_num(0.0).abs().max() <= FP8_MAX


@pytest.mark.gpu
@needs_cuda
def test_kernel_reads_a_strided_block_and_serves_no_rows() -> None:
    wide = activations(64, 640, torch.bfloat16, seed=3).cuda()
    x = wide[:, 128:512]  # row stride 640, columns contiguous
    assert quant_cuda.supports(x) and not x.is_contiguous()
    q, s = quant_cuda.quantize_rows_fp8(x)
    q_ref, s_ref = quantize_rows_fp8(x.contiguous())
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)
    odd = wide[:, 1:385]  # not 16-byte aligned: the kernel's element-wise loads
    q, s = quant_cuda.quantize_rows_fp8(odd)
    q_ref, s_ref = quantize_rows_fp8(odd.contiguous())
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)
    assert not quant_cuda.supports(wide.t())  # strided columns: the declared gap
    q0, s0 = quant_cuda.quantize_rows_fp8(wide[:0])
    assert q0.shape == (0, 640) and s0.shape == (0, 1)


@pytest.mark.gpu
@needs_cuda
def test_the_fp8_lane_quantizes_through_the_kernel() -> None:
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the fp8 lane needs sm_89 or newer")
    from oasr.layers.linear import Linear
    from oasr.quantization.lanes import ScaledMMFp8Lane
    from oasr.quantization.methods import replace_weight
    from oasr.quantization.numerics import quantize_weight_fp8

    torch.manual_seed(0)
    layer = Linear(384, 1536, bias=True).cuda()
    q, scale = quantize_weight_fp8(layer.weight.detach())
    replace_weight(layer, q, scale)
    lane = ScaledMMFp8Lane()
    lane.prepare(layer)
    x = activations(96, 384, torch.bfloat16, seed=5).cuda()
    ops.reset_counts()
    y = lane.matmul(layer, x)
    assert ops.gap_counts() == {("kernel", "quantize_rows_fp8"): 1}
    torch.testing.assert_close(y.float(), lane.reference(layer, x).float(), rtol=1e-2,
                               atol=1e-2 * y.float().abs().max().item())
    ops.set_backend("torch")  # the torch statement: the same product, bit for bit
    try:
        assert torch.equal(lane.matmul(layer, x), y)
    finally:
        ops.set_backend(None)
