"""``conv2d_time_tiled`` (a Conv2d by fixed-shape time tiles) against ``F.conv2d`` on the whole
tensor, and the claim it exists for: whatever the batch's rows and frames, the convolutions it
calls come in a handful of shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from oasr.layers import conv_tiles
from oasr.layers.conv import Conv2d
from oasr.layers.conv_tiles import conv2d_time_tiled


def _reference(x, weight, bias, stride, padding, dilation, groups):
    return F.conv2d(x.permute(0, 3, 1, 2), weight, bias, stride, padding, dilation,
                    groups).permute(0, 2, 3, 1)


CASES = [  # (c_in, c_out, kernel, stride, padding, dilation, groups)
    (8, 8, (3, 3), (2, 2), (1, 1), (1, 1), 8),  # FastConformer's depthwise stage
    (4, 6, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (4, 4, (5, 3), (1, 2), (2, 0), (1, 1), 2),
    (6, 6, (3, 3), (2, 1), (2, 1), (2, 1), 6),
    (1, 5, (3, 3), (2, 2), (1, 1), (1, 1), 1),  # a subsampling's first stage
    (3, 3, (4, 2), (3, 1), (0, 1), (1, 1), 3),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("h", [1, 3, 31, 63, 64, 65, 66, 129, 300])
def test_equals_the_whole_convolution(case, h):
    c_in, c_out, k, s, p, d, g = case
    if h + 2 * p[0] < d[0] * (k[0] - 1) + 1:
        pytest.skip("no output row")
    torch.manual_seed(h)
    x = torch.randn(3, h, 7, c_in, dtype=torch.float64)
    w = torch.randn(c_out, c_in // g, *k, dtype=torch.float64)
    b = torch.randn(c_out, dtype=torch.float64)
    ours = conv2d_time_tiled(x, w, b, s, p, d, g)
    ref = _reference(x, w, b, s, p, d, g)
    assert ours.shape == ref.shape and ours.is_contiguous()
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


def test_many_chunks_and_a_padded_last_one(monkeypatch):
    monkeypatch.setattr(conv_tiles, "MAX_TILES_PER_CALL", 4)
    x = torch.randn(5, 400, 6, 8, dtype=torch.float64)  # 5 rows x 7 tiles: chunks 4,...,4,3->4
    w = torch.randn(8, 1, 3, 3, dtype=torch.float64)
    ours = conv2d_time_tiled(x, w, None, (2, 2), (1, 1), (1, 1), 8)
    torch.testing.assert_close(ours, _reference(x, w, None, (2, 2), (1, 1), (1, 1), 8))


def test_empty_batch():
    w = torch.randn(4, 1, 3, 3)
    out = conv2d_time_tiled(torch.zeros(0, 50, 6, 4), w, None, (2, 2), (1, 1), (1, 1), 4)
    assert out.shape == (0, 25, 3, 4)


def test_batches_of_every_shape_meet_few_convolution_shapes(monkeypatch):
    seen = set()
    conv2d = F.conv2d

    def recording(x, *args):
        seen.add(tuple(x.shape))
        return conv2d(x, *args)

    monkeypatch.setattr(conv_tiles.F, "conv2d", recording)
    w = torch.randn(4, 1, 3, 3)
    for rows in (1, 3, 8, 17, 40):
        for frames in (9, 100, 333, 1000, 1234):
            conv2d_time_tiled(torch.randn(rows, frames, 5, 4), w, None, (2, 2), (1, 1), (1, 1),
                              4)
    # 25 batch shapes; the calls are powers of two of one tile shape, at most 2^8 tiles
    assert len(seen) <= 9
    assert {s[1:] for s in seen} == {(4, 65, 5)}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups,kernel", [(16, 3), (1, 1), (1, 3)])
def test_the_cuda_path_equals_forward_native(dtype, groups, kernel):
    """On CUDA ``Conv2d.forward`` takes the GEMM (pointwise) or the tiles (grouped)."""
    torch.manual_seed(0)
    conv = Conv2d(16, 16, kernel, stride=2 if kernel == 3 else 1, padding=kernel // 2,
                  groups=groups).cuda().to(dtype)
    x = torch.randn(6, 301, 20, 16, device="cuda", dtype=dtype)
    tol = {torch.float32: 1e-4, torch.bfloat16: 3e-2}[dtype]
    # cuDNN convolves fp32 in TF32 by default (1e-3 off); the pointwise GEMM does not
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        ref = conv.forward_native(x)
        ours = conv(x)
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
