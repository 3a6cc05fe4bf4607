"""CPU speed per glibc heap setting: one encoder's forward, and the whole ``oasr transcribe``.

glibc serves a block at or above its mmap threshold with a fresh ``mmap``, returned on free,
so every such tensor is page-faulted in anew each time it is allocated; below the threshold
blocks come from the heap, already resident. ``oasr transcribe`` pins the threshold
(``oasr/transcribe/heap.py``); this measures what each setting costs in speed. Each arm runs in
a process of its own with ``MALLOC_MMAP_THRESHOLD_`` set (``unset``: glibc's moving
threshold in the encoder arm; in the transcribe arm whatever ``oasr transcribe`` pins itself),
arms interleaved over ``--repeat`` rounds.

    python benchmarks/cpu_heap_speed.py OUT.json --bundle B [--batch 8 --frames 750]
        [--manifest M --model tiny.en] [--settings unset,1,8,32] [--repeat 2]

``--bundle``: the encoder of a converted bundle on (batch, frames, bins) random features,
median of 5 forwards after one warm-up. ``--manifest``: the whole ``oasr transcribe`` process
(``--no-progress``), wall from spawn to exit and its peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_ENCODER = """
import statistics, sys, time, torch
from oasr.models.loader import load_pretrained
m = load_pretrained(sys.argv[1]).model.eval()
b, t = int(sys.argv[2]), int(sys.argv[3])
bins = m.config.feature_dim if hasattr(m.config, "feature_dim") else 80
feats, lens = torch.randn(b, t, bins), torch.full((b,), t)
times = []
with torch.no_grad():
    m.encode_offline(feats, lens)
    for _ in range(5):
        t0 = time.perf_counter()
        m.encode_offline(feats, lens)
        times.append(time.perf_counter() - t0)
print(statistics.median(times))
"""


def _env(setting: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if setting != "unset":
        env["MALLOC_MMAP_THRESHOLD_"] = str(int(float(setting) * (1 << 20)))
    return env


def encoder_s(setting: str, bundle: str, batch: int, frames: int) -> float:
    out = subprocess.run([sys.executable, "-c", _ENCODER, bundle, str(batch), str(frames)],
                         env=_env(setting), capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def transcribe_run(setting: str, manifest: str, model: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="oasr-heap-speed-") as tmp:
        start = time.perf_counter()
        with open(Path(tmp) / "log", "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "oasr.cli.app", "transcribe", manifest,
                                     "-o", str(Path(tmp) / "o.parquet"), "-m", model,
                                     "--no-progress"], env=_env(setting), stdout=log,
                                    stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"oasr transcribe exited {code}: "
                               f"{(Path(tmp) / 'log').read_text()[-2000:]}")
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--bundle")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--frames", type=int, default=750)
    ap.add_argument("--manifest")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--settings", default="unset,1,8,32",
                    help="'unset' or a threshold in MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    settings = args.settings.split(",")
    result: dict = {"machine": platform.node(), "cpus": os.cpu_count(),
                    "loadavg_start": os.getloadavg(), "settings": settings,
                    "encoder": {s: [] for s in settings} if args.bundle else None,
                    "transcribe": {s: [] for s in settings} if args.manifest else None,
                    "bundle": args.bundle, "batch": args.batch, "frames": args.frames,
                    "manifest": args.manifest, "model": args.model}
    for r in range(args.repeat):
        for s in settings:
            if args.bundle:
                result["encoder"][s].append(round(encoder_s(s, args.bundle, args.batch,
                                                            args.frames), 3))
                print(f"round {r} {s}: encoder {result['encoder'][s][-1]} s", flush=True)
            if args.manifest:
                result["transcribe"][s].append(transcribe_run(s, args.manifest, args.model))
                print(f"round {r} {s}: transcribe {result['transcribe'][s][-1]}", flush=True)
    result["loadavg_end"] = os.getloadavg()
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
