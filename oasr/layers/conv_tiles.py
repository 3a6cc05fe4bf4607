"""A 2-D convolution over NHWC input run as fixed-shape tiles along H (time), so cuDNN meets the
same few shapes whatever the batch.

cuDNN builds an execution plan for every new input shape, and for depthwise 3x3 convolutions
(FastConformer's subsampling) that costs 0.16-0.18 s per convolution on the H100 (cuDNN 9.19,
``results/gpu_first_shape_2026-12-07.json``): the engine's batches rarely repeat a (rows,
frames) shape, so every batch paid it, several times its own compute. Past 2^31 input elements
cuDNN also picks a slow engine (46 ms where a tensor just under the limit takes 4 ms), and
torch's own depthwise kernel refuses such tensors outright.

Here H is cut into tiles of ``TILE_OUT`` output rows: each tile's input is the
``(TILE_OUT - 1) * stride + dilation * (k - 1) + 1`` rows it reads (zero rows stand for the
padding at both ends), the tiles of every row of the batch are taken in order, and they are
gathered and convolved in chunks of a power-of-two number of tiles (at most
``MAX_TILES_PER_CALL``, and at most 2^30 elements), padding along H dropped and along W kept;
only one chunk of tiles exists at a time.
Every call therefore has one of a handful of shapes per layer, planned once per process. The
result equals ``F.conv2d`` on the whole tensor: each output row reads exactly the input rows
(and zeros) it would read there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["MAX_TILES_PER_CALL", "TILE_OUT", "conv2d_time_tiled"]

TILE_OUT = 32
MAX_TILES_PER_CALL = 256
_MAX_ELEMENTS = 1 << 30


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def conv2d_time_tiled(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      stride: tuple[int, int], padding: tuple[int, int],
                      dilation: tuple[int, int], groups: int) -> torch.Tensor:
    """``F.conv2d`` over NHWC ``x`` (B, H, W, C_in) -> NHWC (B, H', W', C_out), by tiles of H."""
    b, h, w, c = x.shape
    kh = weight.shape[2]
    sh, ph, dh = stride[0], padding[0], dilation[0]
    h_out = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    if b == 0 or h_out <= 0:
        return F.conv2d(x.permute(0, 3, 1, 2), weight, bias, stride, padding, dilation,
                        groups).permute(0, 2, 3, 1).contiguous()
    span = (TILE_OUT - 1) * sh + dh * (kh - 1) + 1  # input rows one tile reads
    step = TILE_OUT * sh
    n_tiles = -(-h_out // TILE_OUT)
    total = b * n_tiles
    per_call = MAX_TILES_PER_CALL
    while per_call > 1 and per_call * span * w * c > _MAX_ELEMENTS:
        per_call //= 2
    offsets = torch.arange(span, device=x.device) - ph
    out: torch.Tensor | None = None
    for start in range(0, total, per_call):
        n = min(per_call, total - start)
        size = _pow2_at_least(n)  # a short last chunk is padded so its shape recurs
        tile = torch.arange(start, start + size, device=x.device)
        rows = (tile % n_tiles * step)[:, None] + offsets  # (size, span) input rows read
        valid = (rows >= 0) & (rows < h) & (tile < total)[:, None]
        # one chunk of tiles gathered at a time: no padded or tiled copy of the whole input
        chunk = x[(tile // n_tiles).clamp(max=b - 1)[:, None], rows.clamp(0, h - 1)]
        chunk.masked_fill_(~valid[:, :, None, None], 0)  # the padding's zero rows
        y = F.conv2d(chunk.permute(0, 3, 1, 2), weight, bias, stride, (0, padding[1]),
                     dilation, groups).permute(0, 2, 3, 1)[:n]
        if out is None:  # written chunk by chunk: no list of outputs held to concatenate
            out = y.new_empty(total, *y.shape[1:])
        out[start:start + n] = y
    assert out is not None
    y = out.view(b, n_tiles * TILE_OUT, out.shape[2], out.shape[3])
    return y[:, :h_out].contiguous()
