"""The decode-step paged attention kernel against the torch path it replaces, on the H200.

Whisper tiny's decoder shapes (6 heads of 64, fp16), batch 64: cross-attention over the 1500
encoder frames and self-attention over 100 tokens, blocks of 16 scattered over the pool. The
torch path is ``oasr.cache.paged_attention`` with ``OASR_LAYERS_BACKEND=torch`` (gather the
blocks, then the layer's SDPA); CUDA events, median of 100 after warm-up.
Usage: python benchmarks/gpu_paged_attention.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
from _timing import cuda_median_ms

from oasr import ops
from oasr.cache.paged import BlockPool
from oasr.cache.paged_attention import paged_attention
from oasr.layers.attention import Attention


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                   "gpu_paged_attention.json"))
    args = ap.parse_args()
    dev, dtype, B, H, D, bs = "cuda", torch.float16, 64, 6, 64, 16
    res: dict[str, object] = {"device": torch.cuda.get_device_name(), "batch": B, "heads": H,
                              "head_dim": D, "block_size": bs}
    for name, keys in (("cross_1500", 1500), ("self_100", 100)):
        per_row = math.ceil(keys / bs)
        pool = BlockPool(1, B * per_row + 1, bs, H, D, dev, dtype)
        pool.kv.normal_()
        table = (torch.randperm(B * per_row, device=dev) + 1).view(B, per_row)
        lens = torch.full((B,), keys, device=dev)
        q = torch.randn(B, H, 1, D, device=dev, dtype=dtype)
        attn = Attention(H, D)

        def run(attn=attn, q=q, pool=pool, table=table, lens=lens, keys=keys):
            return paged_attention(attn, q, pool.k(0), pool.v(0), table, lens, None, keys)

        ops.set_backend("oasr")
        kernel_out = run()
        kernel_ms = cuda_median_ms(run, 100, 10)
        ops.set_backend("torch")
        torch_out = run()
        torch_ms = cuda_median_ms(run, 100, 10)
        ops.set_backend(None)
        res[name] = {"keys": keys, "kernel_ms": kernel_ms, "torch_ms": torch_ms,
                     "speedup": torch_ms / kernel_ms,
                     "max_abs_diff": float((kernel_out.float() - torch_out.float()).abs().max()),
                     "kv_bytes_read_GBps": 2 * B * keys * H * D * 2 / kernel_ms / 1e6}
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
