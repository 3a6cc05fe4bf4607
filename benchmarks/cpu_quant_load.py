"""CPU throughput quiet and under load: ours fp32 / int8 against faster-whisper int8.

Whisper tiny.en, greedy, the first ``--rows`` utterances of the bundled LibriSpeech test-other
manifest (audio decoded before any timing), at each ``--batch-sizes``. Every system runs in a
worker process of its own, started once, warmed, and kept, so the measurements of one round
interleave: for each round, for each condition (``quiet``, then ``loaded``: ``--load-procs``
busy single-thread processes spinning beside the workers), for each batch size, each system
transcribes the rows once. The machine this ran on is shared, so its load average is recorded
around every measurement; compare systems within a round and condition.

Systems (each on ``--threads`` threads: torch's intra-op pool, faster-whisper's
``cpu_threads``):

- ``ours-fp32`` / ``ours-int8``: ``ASREngine`` (``--quantization int8``: the fbgemm lane), with
  ``OMP_WAIT_POLICY=PASSIVE`` as the ``oasr`` CLI sets it;
- ``ours-int8-spin``: the same int8 engine with OpenMP's default wait policy (the variable
  unset), to measure what spinning costs under load;
- ``faster-whisper-int8``: ``oasr.bench.faster_whisper_peer`` (CTranslate2 int8 on the same
  CTranslate2 weights our default model converts from), its environment left as a user
  has it.

Batch 1 is closed-loop (one utterance at a time); batch 8 hands ours every row (its scheduler
groups by length) and faster-whisper batches of 8 in manifest order, as ``oasr bench`` does.

Usage: ``python benchmarks/cpu_quant_load.py [--rows 30] [--threads 2] [--batch-sizes 1,8]
[--rounds 2] [--load-procs 2] [--out benchmarks/results/cpu_quant_load_<date>.json]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MANIFEST = REPO / "manifests" / "librispeech-test-other-70.parquet"

# system -> (kind, quantization, OMP_WAIT_POLICY or None for unset)
SYSTEMS: dict[str, tuple[str, str | None, str | None]] = {
    "ours-fp32": ("ours", None, "PASSIVE"),
    "ours-int8": ("ours", "int8", "PASSIVE"),
    "ours-int8-spin": ("ours", "int8", None),
    "faster-whisper-int8": ("faster-whisper", "int8", None),
}


def _worker(system: str, threads: int, rows: int, conn: Any) -> None:
    """A system's process: load, warm, then time each batch size the parent asks for."""
    import torch

    torch.set_num_threads(threads)
    from oasr.bench.runner import read_clips
    from oasr.models.loader import load_pretrained

    kind, quantization, _ = SYSTEMS[system]
    lm = load_pretrained(None)
    clips = read_clips(str(MANIFEST), lm.feature_config.sample_rate)[:rows]
    if kind == "ours":
        from oasr.engine.config import EngineConfig
        from oasr.engine.engine import ASREngine
        from oasr.engine.request import Request

        engines: dict[int, Any] = {}

        def run(batch: int) -> dict[str, str]:
            engine = engines.get(batch)
            if engine is None:
                engine = engines[batch] = ASREngine(EngineConfig(
                    device="cpu", dtype="fp32", max_batch_size=batch,
                    quantization=quantization), loaded=lm)
            if batch > 1:
                outs = list(engine.run(Request(c.id, c.audio) for c in clips))
            else:
                outs = [o for c in clips for o in engine.run([Request(c.id, c.audio)])]
            return {o.request_id: o.text for o in outs}
    else:
        from oasr.bench.faster_whisper_peer import build_faster_whisper

        peer = build_faster_whisper("", "cpu", None, 224, int8=True, threads=threads)

        def run(batch: int) -> dict[str, str]:
            texts: dict[str, str] = {}
            for i in range(0, len(clips), batch):
                chunk = clips[i:i + batch]
                texts.update(zip([c.id for c in chunk],
                                 peer.transcribe([c.audio for c in chunk]), strict=True))
            return texts

    audio_s = sum(c.seconds for c in clips)
    conn.send(("ready", audio_s, {c.id: c.text for c in clips}))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        batch, warm = msg
        if warm:
            run(batch)
            conn.send(("warm",))
            continue
        cpu0, t0 = time.process_time(), time.perf_counter()
        texts = run(batch)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        conn.send(("done", wall, cpu, texts))


def _start(system: str, threads: int, rows: int) -> tuple[Any, Any, float, dict[str, str]]:
    wait = SYSTEMS[system][2]
    saved = os.environ.get("OMP_WAIT_POLICY")
    # A spawned child reads the environment at its start, before it imports torch.
    if wait is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = wait
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(system, threads, rows, child), daemon=True)
    proc.start()
    if saved is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = saved
    status, audio_s, refs = parent.recv()
    assert status == "ready"
    return proc, parent, audio_s, refs


def _busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--load-procs", type=int, default=2)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" /
                    f"cpu_quant_load_{dt.date.today().isoformat()}.json")
    args = ap.parse_args()
    from oasr.metrics.wer import score
    from oasr.runtime_threads import usable_cores

    sizes = [int(b) for b in args.batch_sizes.split(",")]
    systems = args.systems.split(",")
    workers = {s: _start(s, args.threads, args.rows) for s in systems}
    for _, conn, _, _ in workers.values():
        for b in sizes:
            conn.send((b, True))
            conn.recv()
    records: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for condition in ("quiet", "loaded"):
            busy = _busy(args.load_procs) if condition == "loaded" else []
            try:
                if busy:
                    time.sleep(2.0)
                for b in sizes:
                    for s in systems:
                        _, conn, audio_s, refs = workers[s]
                        load0 = os.getloadavg()[0]
                        conn.send((b, False))
                        _, wall, cpu, texts = conn.recv()
                        wer = score(refs, texts, normalizer="whisper").wer
                        rec = {"round": rnd, "condition": condition, "system": s, "batch": b,
                               "wall_s": wall, "cpu_s": cpu, "audio_s": audio_s,
                               "rtfx": audio_s / wall, "wer": wer, "loadavg_before": load0,
                               "loadavg_after": os.getloadavg()[0]}
                        records.append(rec)
                        print(f"round {rnd} {condition:6s} b{b} {s:22s} RTFx {rec['rtfx']:6.1f} "
                              f"wall {wall:6.1f}s cpu {cpu:6.1f}s WER {wer * 100:5.2f}% "
                              f"load {load0:.1f}", flush=True)
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
    for proc, conn, _, _ in workers.values():
        conn.send(None)
        proc.join(timeout=30)
    summary = _summary(records, systems, sizes)
    payload = {
        "benchmark": "cpu_quant_load", "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(), "cpu_budget": str(usable_cores()),
        "threads": args.threads, "rows": args.rows, "batch_sizes": sizes,
        "load_procs": args.load_procs, "rounds": args.rounds, "manifest": str(MANIFEST),
        "systems": {s: {"kind": SYSTEMS[s][0], "quantization": SYSTEMS[s][1],
                        "OMP_WAIT_POLICY": SYSTEMS[s][2]} for s in systems},
        "summary": summary, "records": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))


def _summary(records: list[dict[str, Any]], systems: list[str], sizes: list[int]
             ) -> dict[str, Any]:
    """Median RTFx per (system, batch, condition), the slowdown under load, and ratios."""
    med: dict[tuple[str, int, str], float] = {}
    for s in systems:
        for b in sizes:
            for cond in ("quiet", "loaded"):
                vals = [r["rtfx"] for r in records
                        if (r["system"], r["batch"], r["condition"]) == (s, b, cond)]
                if vals:
                    med[(s, b, cond)] = statistics.median(vals)
    out: dict[str, Any] = {}
    for b in sizes:
        row: dict[str, Any] = {}
        for s in systems:
            q, ld = med.get((s, b, "quiet")), med.get((s, b, "loaded"))
            row[s] = {"rtfx_quiet": q, "rtfx_loaded": ld,
                      "slowdown_under_load": (q / ld) if q and ld else None}
        for cond in ("quiet", "loaded"):
            for a, c in (("ours-int8", "ours-fp32"), ("ours-int8", "faster-whisper-int8")):
                if (a, b, cond) in med and (c, b, cond) in med:
                    row[f"{a}/{c} ({cond})"] = med[(a, b, cond)] / med[(c, b, cond)]
        out[f"batch_{b}"] = row
    return out


if __name__ == "__main__":
    main()
