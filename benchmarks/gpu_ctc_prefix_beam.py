"""The GPU CTC prefix beam search (``oasr.kernels.ctc_cuda``) on the H200, against our CPU one.

1. The issue's shape, 16 utterances x 200 frames x 5000 units, beam 10: the GPU search timed
   end to end (top-k, beam, read-back into host memory: what ``decode_offline`` costs) and its
   device part alone (CUDA events, median of many runs), the CPU search (``oasr._C.ctc``) on the
   same log-probs with every core and with one; both must return the same hypotheses.
2. Streaming: 64 streams fed 16-frame chunks; the per-chunk cost of ``CtcBeamPool.advance``.
3. The decoder's share of an offline Conformer batch: WeNet's LibriSpeech Conformer size
   (12 x 256, 5000 units; random weights: the cost does not depend on them) in fp16 on 16
   utterances of 10 s of fbank features, encoder + CTC head vs the search.

Log-probs are peaked like a trained model's (most frames blank-dominated), not uniform noise.
Usage: python benchmarks/gpu_ctc_prefix_beam.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
from _timing import cuda_median_ms


def peaked_log_probs(gen: torch.Generator, b: int, t: int, v: int) -> torch.Tensor:
    logits = torch.randn(b, t, v, generator=gen) * 2.0
    logits[..., 0] += 6.0  # blank leads on most frames
    spikes = torch.randint(1, v, (b, t), generator=gen)
    on = torch.rand(b, t, generator=gen) < 0.3
    logits[on, spikes[on]] += 9.0
    return torch.log_softmax(logits, -1)




def wall_median_ms(fn, reps: int = 30, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def same(gpu_rows, cpu_rows) -> float:
    hits = sum(g[0].tokens.tolist() == np.asarray(c[0].tokens).tolist()
               for g, c in zip(gpu_rows, cpu_rows))
    return hits / len(cpu_rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                   "gpu_ctc_prefix_beam.json"))
    args = ap.parse_args()
    from oasr._C import ctc

    from oasr.kernels import ctc_cuda

    gen = torch.Generator().manual_seed(0)
    res: dict[str, object] = {"device": torch.cuda.get_device_name(),
                              "torch": torch.__version__}
    B, T, V, beam = 16, 200, 5000, 10
    lp = peaked_log_probs(gen, B, T, V)
    lens = torch.full((B,), T, dtype=torch.int64)
    dev_lp, dev_lens = lp.cuda(), lens.cuda()

    def gpu_full():
        return ctc_cuda.decode_offline(dev_lp, dev_lens, blank=0, beam_size=beam)

    pool = ctc_cuda.CtcBeamPool(B, beam, max_frames=T)

    def gpu_device_only():
        slots = pool.open(B)
        pool.advance(slots, dev_lp, dev_lens)
        pool.release(slots)

    gpu_full()  # compiles the library on first use
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            gpu_device_only()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev.key[:60]] = ev.device_time_total / 5 / 1e3  # ms per call
    res["kernel_ms_per_call"] = kernels
    res["beam_sweep_device_ms"] = {}
    for b_beam, b_v in ((1, 5000), (4, 5000), (16, 5000), (32, 5000), (10, 32000)):
        sw_lp = peaked_log_probs(gen, B, T, b_v).cuda()
        sw_pool = ctc_cuda.CtcBeamPool(B, b_beam, max_frames=T)

        def sweep(sw_pool=sw_pool, sw_lp=sw_lp):
            slots = sw_pool.open(B)
            sw_pool.advance(slots, sw_lp, dev_lens)
            sw_pool.release(slots)

        res["beam_sweep_device_ms"][f"beam{b_beam}_V{b_v}"] = cuda_median_ms(sweep, 20)
    res["shape"] = {"batch": B, "frames": T, "vocab": V, "beam": beam}
    res["gpu_end_to_end_ms"] = wall_median_ms(gpu_full)
    res["gpu_device_ms"] = cuda_median_ms(gpu_device_only, 50, 5)
    np_lp, np_lens = lp.numpy(), lens.numpy()
    cores = os.cpu_count() or 1
    cpu_rows = ctc.prefix_beam(np_lp, np_lens, 0, beam, 1.0, 1, num_threads=cores)
    t0 = time.perf_counter()
    for _ in range(3):
        ctc.prefix_beam(np_lp, np_lens, 0, beam, 1.0, 1, num_threads=cores)
    res["cpu_ms_all_cores"] = (time.perf_counter() - t0) / 3 * 1e3
    res["cpu_cores"] = cores
    t0 = time.perf_counter()
    ctc.prefix_beam(np_lp, np_lens, 0, beam, 1.0, 1, num_threads=1)
    res["cpu_ms_one_core"] = (time.perf_counter() - t0) * 1e3
    res["same_best_hypothesis"] = same(gpu_full(), cpu_rows)
    res["speedup_vs_cpu_all_cores"] = res["cpu_ms_all_cores"] / res["gpu_end_to_end_ms"]
    res["speedup_vs_cpu_one_core"] = res["cpu_ms_one_core"] / res["gpu_end_to_end_ms"]

    # Streaming: 64 streams, 16-frame chunks (640 ms at 40 ms frames).
    S, C = 64, 16
    stream_lp = peaked_log_probs(gen, S, C * 20, V).cuda()
    spool = ctc_cuda.CtcBeamPool(S, beam, max_frames=C * 20)
    slots = spool.open(S)
    chunk_ms = []
    for i in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        spool.advance(slots, stream_lp[:, i * C:(i + 1) * C])
        b.record()
        b.synchronize()
        chunk_ms.append(a.elapsed_time(b))
    t0 = time.perf_counter()
    spool.finalize(slots)
    res["streaming"] = {"streams": S, "chunk_frames": C, "per_chunk_ms_median":
                        statistics.median(chunk_ms[2:]),
                        "finalize_ms": (time.perf_counter() - t0) * 1e3}

    # The decoder's share of an offline Conformer batch.
    from oasr.models.conformer.config import ConformerConfig
    from oasr.models.conformer.model import ConformerModel

    model = ConformerModel.from_config(ConformerConfig()).cuda().half().eval()
    feats = torch.randn(B, 1000, 80, generator=gen).cuda().half()
    flens = torch.full((B,), 1000, dtype=torch.int64).cuda()

    def encode():
        with torch.inference_mode():
            hidden, hlens = model.encode_offline(feats, flens)
            return model.ctc_log_probs(hidden), hlens

    clp, clens = encode()

    def search():
        return ctc_cuda.decode_offline(clp, clens, blank=0, beam_size=beam)

    enc_ms, dec_ms = wall_median_ms(encode, 20), wall_median_ms(search, 20)
    res["conformer_batch"] = {"utterances": B, "seconds_each": 10.0, "encoder_frames":
                              int(clp.shape[1]), "encoder_ctc_ms": enc_ms, "search_ms": dec_ms,
                              "search_share": dec_ms / (enc_ms + dec_ms)}
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
