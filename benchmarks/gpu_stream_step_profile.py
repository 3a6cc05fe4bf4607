"""Where a paged streaming step's time goes: the Conformer 12 x 256 of
``gpu_stream_concurrency.py`` through ``PagedStreamingBackend.forward_step``, one cohort width
at a time.

    python benchmarks/gpu_stream_step_profile.py OUT.json [--device cuda] [--small]

For each cohort width W (default 1, 16, 64, 256, 512): W streams, random fbank chunks (the
step's cost does not depend on the audio), ``--reps`` steps timed one by one with a device
sync (the first step at a width reported apart: it pays for new shapes), then one more step
under ``torch.profiler`` whose top operators by self CPU and by self device time are written
beside the timings. Answers whether a slow concurrent run is slow steady steps or first-seen
shapes, and which operators hold a step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_stream_concurrency import conformer_model  # noqa: E402

from oasr.engine.paged_backend import PagedStreamingBackend  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def top_ops(prof, key: str, n: int = 15) -> list[dict]:
    rows = []
    for e in sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:n]:
        rows.append({"op": e.key, "calls": e.count,
                     "self_cpu_ms": e.self_cpu_time_total / 1e3,
                     "self_device_ms": getattr(e, "self_device_time_total",
                                               getattr(e, "self_cuda_time_total", 0.0)) / 1e3})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--widths", default="1,16,64,256,512")
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    model = conformer_model(args.small, device, dtype)
    enc = model.encoder
    chunk, left = 16, 4
    enc.configure_streaming(chunk, left)
    window = (chunk - 1) * enc.subsampling_rate + enc.right_context + 1
    widths = [int(w) for w in args.widths.split(",")]
    be = PagedStreamingBackend(model, max_streams=max(widths), device=device, dtype=dtype)
    result: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda"
                    else "cpu", "dtype": str(dtype), "window_frames": window, "widths": []}
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    for w in widths:
        ids = list(range(w))
        for i in ids:
            be.allocate(i)
        x = torch.randn(w, window, 80)

        @torch.inference_mode()
        def step(ids: list[int] = ids, x: torch.Tensor = x) -> None:
            out, _ = be.forward_step(ids, x.to(device, dtype, non_blocking=True))
            model.ctc_log_probs(out).argmax(-1).cpu()

        times = []
        for _ in range(args.reps + 1):
            sync(device)
            t0 = time.perf_counter()
            step()
            sync(device)
            times.append((time.perf_counter() - t0) * 1e3)
        with torch.profiler.profile(activities=acts) as prof:
            step()
            sync(device)
        row = {"width": w, "first_ms": times[0], "steady_ms_median": statistics.median(times[1:]),
               "steady_ms_max": max(times[1:]), "by_self_cpu": top_ops(prof, "self_cpu_time_total"),
               "by_self_device": top_ops(prof, "self_device_time_total")
               if device.type == "cuda" else None}
        result["widths"].append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith("by_")}), flush=True)
        args.out.write_text(json.dumps(result, indent=1))
        for i in ids:
            be.free(i)


if __name__ == "__main__":
    main()
