"""CPU: the one-call transducer greedy decode (greedy_decode.cuh on the host executor) beside
the torch loop (``greedy_search``), icefall's 70M Zipformer decoder/joiner shape (vocab 500,
decoder 512, joiner 512, context 2), random weights, random frames.

    python benchmarks/cpu_transducer_fused.py OUT.json [--threads 2] [--batch 4,16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from oasr.engine.decode.transducer_fused import FusedGreedy
from oasr.engine.decode.transducer_search import greedy_search
from oasr.models.transducer.stateless import AdditiveJoiner, StatelessPredictor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", default="4,16")
    ap.add_argument("--frames", type=int, default=375, help="25 Hz frames: 375 = 15 s")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    pred = StatelessPredictor(500, 512, blank_id=0, context_size=2).eval()
    joiner = AdditiveJoiner(512, 512, 512, 500).eval()
    with torch.no_grad():  # sharper than init, so labels are emitted (each row reports how many)
        joiner.output_linear.weight.mul_(8.0)
    fused = FusedGreedy(pred, joiner, unk_id=None, num_threads=args.threads)
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        hidden = torch.randn(batch, args.frames, 512)
        lens = torch.full((batch,), args.frames)
        ref = greedy_search(pred, joiner, hidden, lens)
        got = fused.search(hidden, lens, 1)
        same = sum(a.tokens == b.tokens for a, b in zip(got, ref, strict=True))
        times = {"loop": [], "fused": []}
        for _ in range(args.runs):
            for name, run in (("loop", lambda h=hidden, n=lens: greedy_search(pred, joiner, h, n)),
                              ("fused", lambda h=hidden, n=lens: fused.search(h, n, 1))):
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        row = {"batch": batch, "frames": args.frames,
               "labels": sum(len(h.tokens) for h in ref), "rows_identical": same,
               "loop_s": statistics.median(times["loop"]),
               "fused_s": statistics.median(times["fused"])}
        row["speedup"] = row["loop_s"] / row["fused_s"]
        print(json.dumps(row))
        rows.append(row)
    args.out.write_text(json.dumps({
        "command": f"python benchmarks/cpu_transducer_fused.py OUT --threads {args.threads} "
                   f"--batch {args.batch} --frames {args.frames}",
        "threads": args.threads, "torch": torch.__version__, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
