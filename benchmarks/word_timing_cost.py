"""What word timings cost: the same utterances decoded with and without them, arms interleaved.

With timings off nothing extra runs (tests/engine/decode/test_aed_word_timings.py asserts that no
teacher-forced pass happens). With them on, each finished row pays one teacher-forced decoder
pass over its cached cross-attention K/V, the DTW and the word pass. Whisper tiny.en, greedy.

    python benchmarks/word_timing_cost.py --audio audio70.npz [--device cuda] [--batch 16]
        [--repeats 3] [--out JSON]

``--audio``: an ``.npz`` with ``ids``, ``lengths`` and ``samples`` (int16, 16 kHz), as the GPU
benchmark takes; ``--bundle`` a converted bundle (default: the packaged model).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

SR = 16000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audio", type=Path, required=True)
    ap.add_argument("--bundle", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from gpu_profile import read_audio  # this folder: the npz reader the GPU probes share

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import DecodingOptions, Request
    from oasr.models.loader import load_pretrained

    rows = read_audio(args.audio)
    audio_s = sum(len(a) for _, a in rows) / SR
    lm = load_pretrained(args.bundle)
    dtype = "fp16" if args.device.startswith("cuda") else "fp32"
    engine = ASREngine(EngineConfig(device=args.device, dtype=dtype, max_batch_size=args.batch),
                       loaded=lm)

    def run(words: bool) -> tuple[float, int]:
        reqs = [Request(uid, a, DecodingOptions(word_timestamps=words)) for uid, a in rows]
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        n_words = sum(len(o.words or []) for o in engine.run(reqs))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0, n_words

    for words in (False, True, False, True):  # warm both paths (and capture step graphs)
        run(words)
    walls: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeats):
        for words in (False, True):
            wall, n_words = run(words)
            walls[words].append(wall)
    batches = int(np.ceil(len(rows) / args.batch))
    off, on = float(np.median(walls[False])), float(np.median(walls[True]))
    result = {
        "benchmark": "word timing cost, Whisper tiny.en greedy", "device": args.device,
        "dtype": dtype, "batch": args.batch, "utterances": len(rows), "audio_s": audio_s,
        "words": n_words, "wall_off_s": walls[False], "wall_on_s": walls[True],
        "median_off_s": off, "median_on_s": on, "overhead_pct": 100 * (on - off) / off,
        "overhead_per_batch_ms": 1000 * (on - off) / batches,
        "command": "python benchmarks/word_timing_cost.py --audio audio70.npz "
                   f"--device {args.device} --batch {args.batch}",
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
