"""fp8 against bf16 on an sm_89+ GPU: the GEMMs alone, then a Whisper model end to end.

1. GEMMs at the shapes of Whisper's encoder blocks (tiny.en, large-v3-turbo) at batch 64 x 1500
   frames: bf16 ``F.linear`` against the fp8 scaled-mm lane (per-token activation quantization
   included) and against the bare ``torch._scaled_mm`` on operands quantized beforehand; CUDA
   events, median of ``--gemm-iters``; the lane's relative error against float64.
2. ``ASREngine`` (``oasr.bench.runner.bench_ours``) on the held-out half of the shared
   LibriSpeech speakers (``benchmarks/speaker_halves.py``: 3005, 3080, 3331, 367; 40
   utterances), bf16 then fp8, at each ``--batch-sizes``, the clips repeated to
   ``--repeat-minutes`` of audio: RTFx, latency, WER (first pass), resident model bytes.

``--shape large-v3-turbo`` runs the engine on a network of that shape with random weights
instead (``--max-new-tokens`` caps its decodes; ``--no-gemms`` skips part 1): RTFx only.

Usage (about a minute on an H100 with tiny.en):
``python benchmarks/gpu_fp8.py OUT.json [--model whisper-tiny.en] [--batch-sizes 1,64]
[--repeat-minutes 10]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MANIFEST = REPO / "manifests" / "librispeech-test-other-70.parquet"
HELDOUT_SPEAKERS = ("3005", "3080", "3331", "367")
# (name, K, N): Whisper encoder fc1 / fc2 / attention projections.
GEMM_SHAPES = (("tiny.en fc1", 384, 1536), ("tiny.en fc2", 1536, 384),
               ("large-v3-turbo qkv", 1280, 3840), ("large-v3-turbo fc1", 1280, 5120),
               ("large-v3-turbo fc2", 5120, 1280))
GEMM_ROWS = 64 * 1500  # batch 64 of 30-s windows after the conv stem


def _bench_shape(name: str, k: int, n: int, iters: int) -> dict[str, Any]:
    import torch
    from _timing import cuda_median_ms

    from oasr import ops
    from oasr.kernels import quant_cuda
    from oasr.layers.linear import Linear
    from oasr.quantization.lanes import ScaledMMFp8Lane
    from oasr.quantization.methods import replace_weight
    from oasr.quantization.numerics import quantize_rows_fp8, quantize_weight_fp8

    lane = ScaledMMFp8Lane()
    torch.manual_seed(0)
    layer = Linear(k, n, bias=True).cuda()
    w_bf16, b_bf16 = layer.weight.detach().bfloat16(), layer.bias.detach().bfloat16()
    x = torch.randn(GEMM_ROWS, k, device="cuda", dtype=torch.bfloat16)
    exact = torch.nn.functional.linear(x[:4096].double(), layer.weight.detach().double(),
                                       layer.bias.detach().double())
    q, scale = quantize_weight_fp8(layer.weight.detach())
    replace_weight(layer, q, scale)
    lane.prepare(layer)
    xq, x_scale = quantize_rows_fp8(x)
    bf16_ms = cuda_median_ms(lambda: torch.nn.functional.linear(x, w_bf16, b_bf16), iters)
    lane_ms = cuda_median_ms(lambda: lane.matmul(layer, x), iters)
    quant_ms = cuda_median_ms(lambda: quant_cuda.quantize_rows_fp8(x), iters)
    ops.set_backend("torch")  # the lane with the torch statement of the activation step
    try:
        lane_torch_ms = cuda_median_ms(lambda: lane.matmul(layer, x), iters)
        quant_torch_ms = cuda_median_ms(lambda: quantize_rows_fp8(x), iters)
    finally:
        ops.set_backend(None)
    bare_ms = cuda_median_ms(lambda: torch._scaled_mm(
        xq, layer._scaled_mm_weight, scale_a=x_scale, scale_b=layer._scaled_mm_scale,
        out_dtype=torch.bfloat16), iters)
    y = lane.matmul(layer, x[:4096])
    flops = 2.0 * GEMM_ROWS * k * n
    row = {
        "shape": name, "m": GEMM_ROWS, "k": k, "n": n,
        "bf16_ms": bf16_ms, "fp8_lane_ms": lane_ms, "fp8_scaled_mm_ms": bare_ms,
        "fp8_lane_torch_quant_ms": lane_torch_ms, "quantize_rows_kernel_ms": quant_ms,
        "quantize_rows_torch_ms": quant_torch_ms,
        "bf16_tflops": flops / bf16_ms / 1e9, "fp8_scaled_mm_tflops": flops / bare_ms / 1e9,
        "speedup_lane": bf16_ms / lane_ms, "speedup_scaled_mm": bf16_ms / bare_ms,
        "fp8_rel_err": ((y.double() - exact).norm() / exact.norm()).item(),
    }
    print(f"{name:22s} bf16 {bf16_ms:7.3f} ms  fp8 lane {lane_ms:7.3f} ms "
          f"({bf16_ms / lane_ms:4.2f}x)  bare _scaled_mm {bare_ms:7.3f} ms "
          f"({bf16_ms / bare_ms:4.2f}x)  rel err {row['fp8_rel_err']:.4f}  quantize kernel "
          f"{quant_ms:6.3f} ms vs torch {quant_torch_ms:6.3f} ms (lane {lane_torch_ms:7.3f} ms)",
          flush=True)
    return row


def bench_gemms(iters: int) -> list[dict[str, Any]]:
    import torch

    rows = []
    for name, k, n in GEMM_SHAPES:
        rows.append(_bench_shape(name, k, n, iters))
        torch.cuda.empty_cache()
    return rows


# Whisper large-v3-turbo's encoder and decoder widths (32 encoder layers, 4 decoder layers).
TURBO = dict(d_model=1280, encoder_layers=32, decoder_layers=4, encoder_attention_heads=20,
             decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120)


def shaped_model(lm: Any, shape: str) -> Any:
    """``lm`` with its network replaced by one of ``shape``'s widths, random weights (seeded),
    keeping its tokenizer and front end (80 mels, tiny.en's vocabulary: the turbo's 128 mels
    and one more token change the stem and the head by a fraction of a percent of its work)."""
    import dataclasses

    import torch

    from oasr.models.whisper.model import WhisperModel

    if shape != "large-v3-turbo":
        raise SystemExit(f"--shape {shape!r}: only large-v3-turbo")
    torch.manual_seed(0)
    cfg = dataclasses.replace(lm.model.config, **TURBO)
    return dataclasses.replace(lm, model=WhisperModel(cfg).eval(), name="large-v3-turbo shape")


def bench_engine(model: str, sizes: list[int], repeat_minutes: float, shape: str = "",
                 max_new_tokens: int | None = None) -> list[dict[str, Any]]:
    from oasr.bench.runner import bench_ours, read_clips
    from oasr.models.loader import load_pretrained

    out = []
    for quantization in (None, "fp8"):
        lm = load_pretrained(model or None)  # a quantization rewrites the model in place
        if shape:
            lm = shaped_model(lm, shape)
        clips = [c for c in read_clips(str(MANIFEST), lm.feature_config.sample_rate)
                 if c.id.split("-")[0] in HELDOUT_SPEAKERS]
        for batch in sizes:
            t0 = time.perf_counter()
            extra = {"max_new_tokens": max_new_tokens} if max_new_tokens else {}
            r = bench_ours(lm, model, clips, batch, "cuda", "bf16", repeat_minutes,
                           quantization=quantization, **extra)
            row = r.to_dict()
            row["quantization"] = quantization or "none"
            row["wall_with_warmup_s"] = time.perf_counter() - t0
            out.append(row)
            print(f"{r.system:10s} b{batch:<4d} RTFx {r.rtfx:8.1f}  WER {r.wer * 100:5.2f}%  "
                  f"p50 {r.latency_p50_ms:8.1f} ms  peak {r.peak_memory_bytes / 2**20:.0f} MiB",
                  flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="the JSON file to write")
    ap.add_argument("--model", default="", help="default: the packaged Whisper tiny.en")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--repeat-minutes", type=float, default=10.0)
    ap.add_argument("--gemm-iters", type=int, default=20)
    ap.add_argument("--shape", default="",
                    help="large-v3-turbo: the engine runs a network of that shape with random "
                         "weights (WER is then meaningless; RTFx is the figure)")
    ap.add_argument("--max-new-tokens", type=int, default=0,
                    help="cap each decode (random weights rarely stop on their own)")
    ap.add_argument("--no-gemms", action="store_true", help="skip the GEMM table")
    args = ap.parse_args()

    import torch

    from oasr.quantization.lanes import ScaledMMFp8Lane

    why = ScaledMMFp8Lane.unavailable("cuda") if torch.cuda.is_available() else "no CUDA GPU"
    if why:
        sys.exit(f"gpu_fp8: {why}")
    t0 = time.perf_counter()
    gemms = [] if args.no_gemms else bench_gemms(args.gemm_iters)
    engine = bench_engine(args.model, [int(b) for b in args.batch_sizes.split(",")],
                          args.repeat_minutes, args.shape, args.max_new_tokens or None)
    by = {(r["quantization"], r["batch_size"]): r for r in engine}
    summary = {f"batch_{b}": {
        "rtfx_bf16": by[("none", b)]["rtfx"], "rtfx_fp8": by[("fp8", b)]["rtfx"],
        "speedup": by[("fp8", b)]["rtfx"] / by[("none", b)]["rtfx"],
        "wer_bf16": by[("none", b)]["wer"], "wer_fp8": by[("fp8", b)]["wer"],
        "wer_delta_points": (by[("fp8", b)]["wer"] - by[("none", b)]["wer"]) * 100,
    } for b in sorted({b for _, b in by})}
    payload = {
        "benchmark": "gpu_fp8", "date": dt.datetime.now().isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__, "model": args.model or "whisper-tiny.en (packaged)",
        "shape": args.shape or None, "max_new_tokens": args.max_new_tokens or None,
        "manifest": str(MANIFEST), "speakers": list(HELDOUT_SPEAKERS),
        "repeat_minutes": args.repeat_minutes, "gemm_rows": GEMM_ROWS,
        "summary": summary, "gemms": gemms, "engine": engine,
        "elapsed_s": time.perf_counter() - t0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
