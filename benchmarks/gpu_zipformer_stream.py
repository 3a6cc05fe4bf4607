"""The causal Zipformer's slot-runtime step (icefall's 70M shape, random weights): time of one
chunk for a cohort of N streams, CUDA graphs (captured per power-of-two width) against eager.

Each width N in ``--widths`` allocates N streams in a ``SlotStreamingBackend`` and times one
``forward_step`` of a chunk for all of them (random features of the chunk's window; the
framing is icefall's: chunk 16 subsampled frames = 45 feature frames, left context 128).
Reported per width and path: the median step in ms (CUDA events, after warm-up, the graph
captured before timing), the streams' real-time factor (chunk seconds * N / step seconds),
and the largest difference between the two paths' outputs. No oracle is needed.

Usage: python benchmarks/gpu_zipformer_stream.py OUT.json [--dtype bf16] [--widths 1,4,16,64]
       python benchmarks/gpu_zipformer_stream.py OUT.json --device cpu --small   (smoke)
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from oasr.engine.streaming_backend import build_streaming_backend  # noqa: E402
from oasr.models.zipformer.config import ZipformerConfig  # noqa: E402
from oasr.models.zipformer.model import ZipformerModel  # noqa: E402

SMALL = dict(feature_dim=80, downsampling_factor=(1, 2), encoder_dim=(32, 48),
             num_encoder_layers=1, num_heads=2, query_head_dim=8, value_head_dim=4,
             feedforward_dim=64, cnn_module_kernel=7, pos_dim=16, vocab_size=50,
             decoder_dim=32, joiner_dim=32)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def step_ms(fn, device: torch.device, reps: int) -> float:
    if device.type == "cuda":
        from _timing import cuda_median_ms

        return cuda_median_ms(fn, reps=reps)
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--widths", default="1,2,4,8,16,32,64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    torch.manual_seed(0)
    cfg = ZipformerConfig(**(SMALL if args.small else {}), causal=True)
    model = ZipformerModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model = model.to(device, dtype).eval()
    enc = model.encoder
    geo = enc.streaming_geometry(enc.streaming_chunk_frames)
    chunk_s = geo.stride * 0.01
    widths = [int(w) for w in args.widths.split(",")]
    rows = []
    with torch.inference_mode():
        for n in widths:
            x = torch.randn(n, geo.window, cfg.feature_dim, device=device)
            row = {"streams": n}
            outs = {}
            paths = [("eager", False)] + ([("graphs", True)] if device.type == "cuda" else [])
            for name, graphs in paths:
                backend = build_streaming_backend(model, max_streams=max(widths), device=device,
                                                  dtype=dtype, use_cuda_graphs=graphs)
                for s in range(n):
                    backend.allocate(s)
                ids = list(range(n))
                outs[name] = backend.forward_step(ids, x)[0].float()  # captures, if graphs
                ms = step_ms(lambda b=backend, i=ids, c=x: b.forward_step(i, c), device, args.reps)
                row[f"{name}_ms"] = round(ms, 3)
                row[f"{name}_rtfx"] = round(chunk_s * n / (ms / 1000), 1)
            if "graphs" in outs:
                row["max_abs_diff"] = float((outs["graphs"] - outs["eager"]).abs().max())
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "benchmark": "gpu_zipformer_stream",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "dtype": args.dtype, "small": args.small,
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "chunk": {"output_frames": geo.chunk, "window": geo.window, "stride": geo.stride,
                  "left_context_frames": enc.streaming.left_context_frames,
                  "audio_s": chunk_s},
        "note": "the first forward_step of the graph path per width captures it (untimed); "
                "the states advance every timed step (the left window fills)",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
