"""Audio decoding on worker threads while another thread keeps the GIL busy.

``oasr transcribe`` decodes rows on a thread pool (``oasr/transcribe/prefetch.py``) while the
engine's thread runs Python between its launches. This times decoding the bundled 70 LibriSpeech
utterances (FLAC bytes embedded in the manifest, the Hugging Face layout) on 2 worker threads
with a third thread spinning in pure Python, for each way of handing libsndfile the bytes and
each GIL switch interval:

- ``bytesio``: a file object (libsndfile calls back into Python for every read);
- ``memfd``: an anonymous in-memory file (``os.memfd_create``), read with system calls -- what
  ``oasr.audio.readers.open_reader`` does with bytes on Linux;

and, for scale, the same with no spinning thread. Reported: the wall to decode all rows and the
spinning thread's loop rate (what the busy thread keeps of its own speed).

Usage: ``python benchmarks/cpu_decode_contention.py OUT.json [--repeat 3]``; the median of the
repeats is kept.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oasr.audio.readers import _memory_file  # noqa: E402

MANIFEST = REPO / "manifests" / "librispeech-test-other-70.parquet"


def _bytesio(data: bytes):
    with sf.SoundFile(io.BytesIO(data)) as f:
        return f.read(dtype="float32")


def _memfd(data: bytes):
    fd = _memory_file(data)  # the reader's own in-memory file
    try:
        with sf.SoundFile(f"/proc/self/fd/{fd}") as f:
            return f.read(dtype="float32")
    finally:
        os.close(fd)


def _time(fn, blobs: list[bytes], busy: bool) -> tuple[float, float]:
    stop = threading.Event()
    loops = [0]

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i
            loops[0] += 1

    spinner = threading.Thread(target=spin) if busy else None
    if spinner:
        spinner.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(fn, blobs))
    wall = time.perf_counter() - t0
    stop.set()
    if spinner:
        spinner.join()
    return wall, loops[0] / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    blobs = [a["bytes"] for a in pq.read_table(MANIFEST, columns=["audio"])
             .column("audio").to_pylist()]
    default_interval = sys.getswitchinterval()
    results = []
    for interval in (default_interval, 0.001, 0.0002):
        sys.setswitchinterval(interval)
        for busy in (False, True):
            for name, fn in (("bytesio", _bytesio), ("memfd", _memfd)):
                runs = [_time(fn, blobs, busy) for _ in range(args.repeat)]
                wall = statistics.median(r[0] for r in runs)
                rate = statistics.median(r[1] for r in runs)
                results.append({"switch_interval_ms": interval * 1e3, "busy_thread": busy,
                                "reader": name, "rows": len(blobs), "wall_s": round(wall, 3),
                                "busy_loops_per_s": round(rate) if busy else None})
                print(f"switch {interval * 1e3:.1f} ms, busy {busy!s:5s}, {name:7s}: "
                      f"{wall:.3f} s" + (f", busy thread {rate:,.0f} loops/s" if busy else ""),
                      flush=True)
    sys.setswitchinterval(default_interval)
    args.out.write_text(json.dumps({
        "benchmark": "cpu_decode_contention", "manifest": str(MANIFEST.relative_to(REPO)),
        "workers": 2, "repeat": args.repeat, "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "soundfile": sf.__version__, "libsndfile": sf.__libsndfile_version__,
        "results": results}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
