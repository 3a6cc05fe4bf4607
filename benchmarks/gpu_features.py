"""The GPU feature frontends (``oasr.kernels.features_cuda``) against their torch paths on CUDA.

Cases: (a) whisper_logmel, 64 rows x 30 s, 80 mels (and 128, large-v3's); (b) Kaldi fbank, 64 rows
x 15 s, 80 bins. Each path is timed with CUDA events around one call on device-resident audio
(3 warm-ups, median of 20); the kernel path's per-kernel device times come from one profiled
call. The two paths' outputs are compared (max abs difference) on the same input; on this
audio fbank's lowest bands sit ~1e-12 below their frames' peaks, where fp32 framing alone moves
the log-mel by ~1e-2 (the torch path on CUDA differs from its own CPU run by more than the
kernels do), so that number is a conditioning figure, not a parity test: the tests hold those.

Usage: python benchmarks/gpu_features.py [--out results.json]   (default: $OUT/gpu_features.json
when OUT is set; no file otherwise). Needs only torch and oasr.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
from _timing import cuda_median_ms

from oasr.features import FeatureConfig
from oasr.features.kaldi import fbank_native
from oasr.features.whisper_logmel import whisper_logmel_native
from oasr.kernels import features_cuda

SR = 16000


def speech_like(batch: int, seconds: float, gen: torch.Generator) -> torch.Tensor:
    """Partials under a syllable-rate envelope over a noise floor, on the device."""
    n = int(seconds * SR)
    t = torch.arange(n, device="cuda", dtype=torch.float32) / SR
    x = 0.01 * torch.randn(batch, n, device="cuda", generator=gen)
    for _ in range(5):
        f = torch.empty(batch, 1, device="cuda").uniform_(80, 4000, generator=gen)
        a = torch.empty(batch, 1, device="cuda").uniform_(0.02, 0.3, generator=gen)
        env = 1.0 + 0.5 * torch.sin(2 * math.pi * 4.0 * t)
        x += a * env * torch.sin(2 * math.pi * f * t)
    return x




def kernel_breakdown(fn) -> dict[str, float]:
    """Device ms per call of each kernel the call launches (torch profiler, one call)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            out[ev.key[:70]] = round(ev.device_time_total / 1e3, 4)
    return out


def case(name: str, native, kernel, x: torch.Tensor, lens: torch.Tensor,
         config: FeatureConfig) -> dict[str, object]:
    ref, ref_lens = native(x, lens, config)
    got, got_lens = kernel(x, lens, config)  # compiles the library on first use
    torch_ms = cuda_median_ms(lambda: native(x, lens, config))
    kernel_ms = cuda_median_ms(lambda: kernel(x, lens, config))
    return {
        "case": name,
        "shape": list(x.shape),
        "out_shape": list(got.shape),
        "torch_ms": round(torch_ms, 3),
        "kernel_ms": round(kernel_ms, 3),
        "speedup": round(torch_ms / kernel_ms, 2),
        "max_abs_diff": float((got - ref).abs().max()),
        "same_lengths": bool(torch.equal(got_lens, ref_lens)),
        "kernel_breakdown_ms": kernel_breakdown(lambda: kernel(x, lens, config)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    out_dir = os.environ.get("OUT")
    ap.add_argument("--out", default=os.path.join(out_dir, "gpu_features.json") if out_dir
                    else None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []

    x = speech_like(64, 30.0, gen)
    lens = torch.randint(SR, x.shape[1] + 1, (64,), device="cuda", generator=gen)
    for n_mels in (80, 128):
        config = FeatureConfig("whisper_logmel", num_mel_bins=n_mels)
        rows.append(case(f"whisper_logmel 64x30s {n_mels} mels", whisper_logmel_native,
                         features_cuda.whisper_logmel_cuda, x, lens, config))
    del x
    x = speech_like(64, 15.0, gen)
    lens = torch.randint(SR, x.shape[1] + 1, (64,), device="cuda", generator=gen)
    config = FeatureConfig("fbank", num_mel_bins=80, params={"audio_scale": 32768.0})
    rows.append(case("fbank 64x15s 80 bins", fbank_native, features_cuda.fbank_cuda, x, lens,
                     config))

    print(f"{'case':34s} {'torch ms':>9s} {'kernel ms':>10s} {'speed-up':>9s} {'max diff':>9s}")
    for r in rows:
        print(f"{r['case']:34s} {r['torch_ms']:9.3f} {r['kernel_ms']:10.3f} "
              f"{r['speedup']:8.2f}x {r['max_abs_diff']:9.2e}")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "allow_tf32": torch.backends.cuda.matmul.allow_tf32, "cases": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
