"""The TDT greedy search alone, on the encoder output of real audio: the host loop
(``tdt_search.tdt_greedy``) against the device loop (``tdt_graph``), eager and from graphs, all
in one process on the same batches.

    python benchmarks/gpu_tdt_loop.py OUT.json --bundle DIR --audio audio70.npz [--batch 256]

``--bundle``: a parakeet_tdt bundle (``benchmarks/gpu_record.py`` converts one into its work
folder, ``record_models.py parakeet_tdt SRC --convert BUNDLE`` too); ``--audio``: the npz
``gpu_record.py`` writes (int16 samples, lengths, ids) or a folder of .flac files. The engine
runs once over the rows to collect each micro-batch's (hidden, lengths) as the ``tdt`` family
receives them; then each search variant runs over every collected batch (one warm-up pass,
then ``--reps`` timed passes, synchronised wall clock, median). Every variant's hypotheses are
compared with the host loop's (rows equal / rows). RTFx is the rows' audio over the search time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from gpu_profile import read_audio  # noqa: E402

SR = 16000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--audio", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=4, help="passes over the npz rows")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    args = ap.parse_args()

    from oasr.engine.config import EngineConfig
    from oasr.engine.decode.tdt_graph import TdtDeviceGreedy
    from oasr.engine.decode.tdt_search import tdt_greedy
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.models.loader import load_pretrained

    rows = read_audio(args.audio) * args.repeat
    audio_s = sum(len(a) for _, a in rows) / SR
    engine = ASREngine(EngineConfig(device=args.device, dtype=args.dtype,
                                    max_batch_size=args.batch,
                                    max_decode_slots=max(256, args.batch)),
                       loaded=load_pretrained(args.bundle))
    strategy = engine.strategy
    if strategy.name != "tdt":
        raise SystemExit(f"{args.bundle} decodes with {strategy.name!r}, not tdt")
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    search = strategy.search

    def collect(hidden, lens):
        batches.append((hidden.clone(), lens.clone()))
        return search(hidden, lens)

    strategy.search = collect
    list(engine.run(Request(f"{u}#{i}", a) for i, (u, a) in enumerate(rows)))
    strategy.search = search
    device = batches[0][0].device
    model, max_sym = engine.runner.model, strategy.max_symbols
    args_ = (strategy.blank, strategy.vocab_size, strategy.durations)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def run_all(fn):
        return [fn(h, n) for h, n in batches]

    def timed(fn) -> tuple[float, list]:
        out = run_all(fn)  # warm-up: graphs captured, caches filled
        times = []
        for _ in range(args.reps):
            sync()
            t0 = time.perf_counter()
            run_all(fn)
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), out

    host = lambda h, n: tdt_greedy(model.predictor, model.joiner, h, n, *args_, max_sym)  # noqa: E731
    eager = TdtDeviceGreedy(model.predictor, model.joiner, *args_, graphs=False)
    graphed = TdtDeviceGreedy(model.predictor, model.joiner, *args_, graphs=True)
    variants = {
        "host_loop": host,
        "device_eager": lambda h, n: eager.search(h, n, max_sym),
        "device_graphs": lambda h, n: graphed.search(h, n, max_sym),
    }
    result: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "dtype": args.dtype, "batch": args.batch,
        "rows": len(rows), "audio_s": round(audio_s, 1), "micro_batches": len(batches),
        "max_symbols_per_step": max_sym, "reps": args.reps, "variants": {},
    }
    ref = None
    for name, fn in variants.items():
        s, out = timed(fn)
        hyps = [h for batch in out for h in batch]
        if ref is None:
            ref = hyps
        result["variants"][name] = {
            "search_s": round(s, 4), "rtfx": round(audio_s / s),
            "rows_equal_host_loop": sum(a.tokens == b.tokens and a.frames == b.frames
                                        for a, b in zip(hyps, ref)),
            "labels": sum(len(h.tokens) for h in hyps)}
        print(name, result["variants"][name], flush=True)
    result["graph_captures"] = graphed.captures
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
