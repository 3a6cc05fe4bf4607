"""The word-timing alignment of one batch: per row (the previous path) against batched.

Whisper tiny.en on 64 real LibriSpeech test-other utterances (``$OASR_SHARED_DATA`` or
``../shared/data``): the engine decodes them (timings off) for their tokens, one prefill gives
their cross-attention K/V, then the alignment of all 64 rows is timed (wall clock, synchronised)
both ways:

- ``per_row``: ``align_rows_per_row``, one teacher-forced pass, then each row's matrix built
  alone (about 15 launches per row), one read-back, and each row's DTW on the host
  (``oasr._C.alignment.dtw``): what the engine ran before.
- ``batched``: ``align_rows``, the same pass, one matrix build for the batch and one DTW for the
  batch (``dtw_cuda``: one launch, one read-back).

Also timed apart: the pass alone, the spans from the pass's scores both ways, and the DTW of the
batch's real cost matrices on the device kernel, the host C++ batch, the host per-row calls
and the torch oracle (``forward_native``). Correctness is recorded beside the timings: the
spans of both paths per row, the kernel against the oracle and the host DTW on the real
matrices and on random ragged ones (length-1 rows and columns, more tokens than frames).

    python benchmarks/gpu_align.py OUT.json (or --out OUT.json) [--rows 64] [--device cuda]
        [--dtype fp16] [--reps 10] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from oasr import envs

SR = 16000


def wall_ms(fn, device: torch.device, reps: int, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` (device synchronised before and after)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1000.0)
    return round(statistics.median(times), 3)


def data_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = envs.shared_data()
    if env:
        return env
    for p in (Path("/work/shared/data"), Path(__file__).resolve().parents[2] / "shared/data"):
        if p.is_dir():
            return p
    raise SystemExit("no shared data: pass --data or set OASR_SHARED_DATA")


def build_batch(args, device: torch.device):
    """The rows' align inputs: prompts, texts, frames, cross K/V, and the engine."""
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.models.loader import load_pretrained

    files = sorted((data_dir(args.data) / "librispeech-test-other-70" / "audio").glob("*.flac"))
    files = (files * math.ceil(args.rows / len(files)))[:args.rows]
    wavs = [sf.read(f, dtype="float32")[0] for f in files]
    lm = load_pretrained(None)
    engine = ASREngine(EngineConfig(device=str(device), dtype=args.dtype,
                                    max_batch_size=args.rows), loaded=lm)
    reqs = [Request(f"r{i}", w) for i, w in enumerate(wavs)]
    outs = {o.request_id: o for o in engine.run(reqs)}
    strat, cfg = engine.strategy, lm.model.config
    with torch.inference_mode():
        feats, lens = engine.inputs(reqs)
        enc, enc_lens = engine.runner.forward(feats, lens, strat.consumes)
        rows, _ = strat._prompts(reqs, enc)  # no request prompt here: one length
        prompt = torch.tensor(rows, device=enc.device)
        _, state = lm.model.decoder.prefill(enc, prompt, prompt.shape[1] + 1, enc_lens)
        cross_k, cross_v = state.cross.rows(torch.arange(len(reqs), device=enc.device))
    base = list(cfg.prompt_ids(task="transcribe", language=None))
    if cfg.no_timestamps_token_id is not None and cfg.no_timestamps_token_id not in base:
        base.append(cfg.no_timestamps_token_id)
    texts = [[t for t in outs[r.request_id].token_ids if t < cfg.eos_token_id] for r in reqs]
    spf = strat.clock.seconds_per_frame
    frames = [math.ceil(len(w) / SR / spf) for w in wavs]
    heads = [tuple(h) for h in cfg.alignment_heads]
    return engine, [list(base) for _ in reqs], texts, frames, cross_k, cross_v, heads


def ragged_cases(device: torch.device) -> dict:
    """Kernel == oracle == host DTW on random ragged batches."""
    from oasr.engine.decode import dtw

    rng = np.random.default_rng(0)
    cases = {"ragged": ([1, 7, 40, 3, 120, 1, 64], [1, 300, 25, 2, 1500, 9, 64]),
             "tokens_over_frames": ([50, 9, 2], [3, 1, 2]),
             "ties": ([12, 30, 5], [40, 30, 5])}
    out = {}
    for name, (rows, frames) in cases.items():
        shape = (len(rows), max(rows), max(frames))
        if name == "ties":
            cost = torch.tensor(rng.integers(0, 2, shape).astype(np.float32))
        else:
            cost = torch.tensor(rng.standard_normal(shape).astype(np.float32))
        oracle = dtw.forward_native(cost, rows, frames).numpy()
        host = dtw.dtw_starts(cost, rows, frames)
        row = {"host_equals_oracle": bool((host == oracle).all())}
        if device.type == "cuda":
            from oasr.kernels import dtw_cuda

            kern = dtw_cuda.dtw_starts(cost.to(device), rows, frames).cpu().numpy()
            row["kernel_equals_oracle"] = bool((kern == oracle).all())
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", default=None)
    ap.add_argument("--out", dest="out_flag", type=Path, default=None,
                    help="the same as the positional OUT (gpu_kernels.sh passes --out)")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    args.out = args.out or args.out_flag
    if args.out is None:
        ap.error("name the output JSON (OUT or --out)")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    args.dtype = args.dtype or ("fp16" if device.type == "cuda" else "fp32")

    from oasr import ops
    from oasr.engine.decode import attention_align as aa
    from oasr.engine.decode import dtw
    from oasr.native import native

    engine, prompts, texts, frames, ck, cv, heads = build_batch(args, device)
    dec = engine.model.decoder
    eot = engine.strategy.eos_id
    doc: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda"
                 else "cpu", "dtype": args.dtype, "rows": args.rows,
                 "tokens_per_row": {"mean": round(float(np.mean([len(t) for t in texts])), 1),
                                    "max": max(len(t) for t in texts)},
                 "frames": {"mean": round(float(np.mean(frames)), 1), "max": max(frames)},
                 "reps": args.reps}
    snap = ops.snapshot()
    with torch.inference_mode():
        a = aa.align_rows_per_row(dec, prompts, texts, frames, ck, cv, heads, eot)
        b = aa.align_rows(dec, prompts, texts, frames, ck, cv, heads, eot)
        same = [bool(np.array_equal(x.starts, y.starts) and np.array_equal(x.ends, y.ends))
                for x, y in zip(a, b)]
        doc["spans_equal_rows"] = f"{sum(same)}/{len(same)}"
        doc["dispatch"] = {f"{k[0]}:{k[1]}": v for k, v in ops.counts_since(snap).items()
                           if "dtw" in str(k)}
        t = {"align_per_row_ms": wall_ms(
                lambda: aa.align_rows_per_row(dec, prompts, texts, frames, ck, cv, heads, eot),
                device, args.reps),
             "align_batched_ms": wall_ms(
                lambda: aa.align_rows(dec, prompts, texts, frames, ck, cv, heads, eot),
                device, args.reps)}
        tokens, lens = aa._padded_tokens(prompts, texts, eot, ck[0].device)
        t["pass_ms"] = wall_ms(lambda: dec.cross_attention_scores(tokens, ck, cv, heads),
                               device, args.reps)
        scores = dec.cross_attention_scores(tokens, ck, cv, heads)
        t["spans_per_row_ms"] = wall_ms(
            lambda: aa.spans_per_row(scores, lens, prompts, texts, frames), device, args.reps)
        t["spans_batched_ms"] = wall_ms(
            lambda: aa.spans_batched(scores, lens, prompts, texts, frames), device, args.reps)
        counts = [len(x) + 1 for x in texts]
        firsts = [len(p) - 1 for p in prompts]
        t["matrices_batched_ms"] = wall_ms(
            lambda: aa.alignment_matrices(scores, lens, firsts, counts, frames), device,
            args.reps)
        cost = -aa.alignment_matrices(scores, lens, firsts, counts, frames)
        host = cost.float().cpu()
        hnp = host.numpy()
        n_arr, m_arr = np.asarray(counts, np.int64), np.asarray(frames, np.int64)
        t["dtw_host_batch_ms"] = wall_ms(
            lambda: native("alignment").dtw_starts(hnp, n_arr, m_arr), device, args.reps)
        t["dtw_host_per_row_ms"] = wall_ms(
            lambda: [native("alignment").dtw(np.ascontiguousarray(hnp[i, :counts[i],
                                                                      :frames[i]]))
                     for i in range(len(counts))], device, args.reps)
        oracle = dtw.forward_native(cost, counts, frames).cpu().numpy()
        doc["dtw_real"] = {"host_batch_equals_oracle": bool(
            (native("alignment").dtw_starts(hnp, n_arr, m_arr) == oracle).all())}
        t["dtw_forward_native_ms"] = wall_ms(lambda: dtw.forward_native(cost, counts, frames),
                                             device, max(1, args.reps // 5), warmup=1)
        if device.type == "cuda":
            from oasr.kernels import dtw_cuda

            t["dtw_kernel_ms"] = wall_ms(lambda: dtw_cuda.dtw_starts(cost, counts, frames),
                                         device, args.reps)
            t["dtw_kernel_with_readback_ms"] = wall_ms(
                lambda: dtw_cuda.dtw_starts(cost, counts, frames).cpu(), device, args.reps)
            doc["dtw_real"]["kernel_equals_oracle"] = bool(
                (dtw_cuda.dtw_starts(cost, counts, frames).cpu().numpy() == oracle).all())
    t["align_speedup"] = round(t["align_per_row_ms"] / t["align_batched_ms"], 2)
    doc["timings"] = t
    doc["dtw_random"] = ragged_cases(device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
