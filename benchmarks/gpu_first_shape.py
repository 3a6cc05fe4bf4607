"""What a batch shape the process has not seen before costs: the encoder's first call at a new
(rows, frames) against its second call at the same shape, and the subsampling stage alone, with
cuDNN on and off.

    python benchmarks/gpu_first_shape.py OUT.json --bundle DIR [--dtype bf16]

``--bundle``: a FastConformer bundle (parakeet_ctc / parakeet_tdt; ``benchmarks/gpu_record.py``
converts them into its work folder). Features are random (the cost in question is per shape,
not per value). Each arm uses shapes no earlier arm used, so every first call is a first call
for the process. The first first-call of the process (CUDA context, cuBLAS handles) is reported
apart as ``process_warmup``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    args = ap.parse_args()

    from oasr.models.loader import load_pretrained

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    device = torch.device("cuda")
    model = load_pretrained(args.bundle, device=device).model.to(dtype=dtype).eval()
    bins = model.config.num_mel_bins

    def timed(fn) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return round(time.perf_counter() - t0, 4)

    def feats(rows: int, frames: int):
        x = torch.randn(rows, frames, bins, device=device, dtype=dtype)
        return x, torch.full((rows,), frames, dtype=torch.int64, device=device)

    result: dict = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
                    "cudnn": torch.backends.cudnn.version(), "dtype": args.dtype,
                    "bundle": args.bundle, "arms": {}}
    with torch.inference_mode():
        x, n = feats(8, 500)
        result["process_warmup"] = {"first": timed(lambda: model.encode_offline(x, n)),
                                    "second": timed(lambda: model.encode_offline(x, n))}
        shapes = iter([(64, f) for f in range(1000, 3000, 37)])
        for arm, cudnn in (("encoder", True), ("subsampling", True),
                           ("encoder_no_cudnn", False), ("subsampling_no_cudnn", False)):
            torch.backends.cudnn.enabled = cudnn
            rows = []
            for _ in range(4):
                b, t = next(shapes)
                x, n = feats(b, t)
                if arm.startswith("encoder"):
                    call = lambda x=x, n=n: model.encode_offline(x, n)  # noqa: E731
                else:
                    call = lambda x=x, n=n: model.encoder.subsampling(x, n)  # noqa: E731
                rows.append({"rows": b, "frames": t, "first": timed(call),
                             "second": timed(call)})
            result["arms"][arm] = rows
            print(arm, rows, flush=True)
        torch.backends.cudnn.enabled = True
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
