"""Resident memory of a long run with the packaged tiny.en, with and without the pinned glibc mmap
threshold (``oasr/transcribe/heap.py``, what ``oasr transcribe`` does at start).

Rows are 40 distinct LibriSpeech clips cut to 1.0-1.9 s, repeated; the engine runs in process
(``transcribe()``), batch 16, and the current RSS is printed every 32 rows. Run each setting in
its own process:

    python benchmarks/cpu_heap_threshold.py --rows 320            # glibc's moving threshold
    python benchmarks/cpu_heap_threshold.py --rows 320 --pin      # pinned where oasr transcribe pins it
    python benchmarks/cpu_heap_threshold.py --rows 320 --pin 32   # pinned at 32 MiB
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=320)
    ap.add_argument("--pin", type=float, nargs="?", const=0.0, default=None, metavar="MIB",
                    help="pin the mmap threshold first, at MIB MiB (oasr transcribe's when no "
                         "value is given)")
    args = ap.parse_args()
    if args.pin is not None:
        from oasr.transcribe.heap import MMAP_THRESHOLD, pin_mmap_threshold

        if not args.pin:
            args.pin = MMAP_THRESHOLD / (1 << 20)
        assert pin_mmap_threshold(int(args.pin * (1 << 20))), "mallopt refused (not glibc?)"
    import torch

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.io import OutputWriter
    from oasr.transcribe.runner import TranscribeOptions, transcribe
    from tests.helpers.data import SHARED_DATA

    torch.set_num_threads(2)
    sources = sorted((SHARED_DATA / "librispeech-test-other-70" / "audio").glob("*.flac"))[:40]
    with tempfile.TemporaryDirectory(prefix="oasr-heap-") as tmp:
        tmp = Path(tmp)
        for i, src in enumerate(sources):
            audio, sr = sf.read(src, dtype="float32")
            sf.write(tmp / f"c{i}.wav", audio[:int((1 + (i % 10) / 10) * sr)], sr)
        manifest = tmp / "m.jsonl"
        with open(manifest, "w") as f:
            for k in range(args.rows):
                f.write(json.dumps({"id": f"u{k}", "audio": str(tmp / f"c{k % len(sources)}.wav"),
                                    "text": "a reference"}) + "\n")
        engine = ASREngine(EngineConfig(device="cpu", max_batch_size=16))
        marks: list[tuple[int, float]] = []

        def on_row(out, stats) -> None:
            if stats.rows % 32 == 0:
                marks.append((stats.rows, round(_rss_mb())))

        start = time.perf_counter()
        transcribe(engine, TranscribeOptions(inputs=[str(manifest)]),
                   OutputWriter(tmp / "o.parquet"), on_row=on_row)
        usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"pinned_mib": args.pin, "rows": args.rows, "rss_mb_every_32_rows": marks,
                      "peak_rss_mb": usage.ru_maxrss // 1024,
                      "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                      "wall_s": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
