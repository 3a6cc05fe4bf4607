"""Peak memory of ``oasr transcribe`` against the number of rows: it must stay flat.

Each size runs the real command (``python -m oasr.cli.app transcribe``: manifest count and
stream, the engine, the writer's parts and final merge, the summary) in a fresh process on a
JSONL manifest of N short rows, all the same 1.5 s clip, and reads that process's peak RSS
(``wait4``'s ``ru_maxrss``: the child alone).

The model is, by default, a tiny random Whisper (``tests/transcribe/conftest.py``: the real
tiny.en tokenizer, d_model 16, a 2 s window, 4 new tokens a window) so 100,000 rows take
minutes on a CPU: what is measured is everything around the model (manifest, scheduling, rows
in flight, output), which is what could grow with the rows. ``--model default`` runs the
packaged tiny.en instead (use ``--sizes`` of a few hundred on a CPU).

    python benchmarks/cpu_memory_rows.py                       # 1k, 10k, 100k rows
    python benchmarks/cpu_memory_rows.py --sizes 1000 10000    # shorter
    python benchmarks/cpu_memory_rows.py --clip silence        # no engine work: fast
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CLIP_SECONDS = 1.5
SAMPLE_RATE = 16000


def _clip(path: Path, kind: str) -> Path:
    """1.5 s of LibriSpeech speech when the shared data is there, else a synthetic chirp; or
    1.5 s of digital silence (decoded and checked, never sent to the engine)."""
    from tests.helpers.data import SHARED_DATA

    source = SHARED_DATA / "librispeech-test-other-70" / "audio" / "1688-142285-0002.flac"
    n = int(CLIP_SECONDS * SAMPLE_RATE)
    if kind == "silence":
        audio = np.zeros(n, np.float32)
    elif source.is_file():
        audio, sr = sf.read(str(source), dtype="float32")
        assert sr == SAMPLE_RATE
        audio = audio[:n]
    else:
        t = np.arange(n) / SAMPLE_RATE
        audio = (0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32)
    sf.write(path, audio, SAMPLE_RATE)
    return path


def _manifest(path: Path, clip: Path, rows: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for k in range(rows):
            f.write(json.dumps({"id": f"u{k:07d}", "audio": str(clip), "text": "a reference"})
                    + "\n")
    return path


def _run(manifest: Path, out: Path, model: str, batch: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "oasr.cli.app", "transcribe", str(manifest), "-o", str(out),
           "--model", model, "--no-progress", "--batch-size", str(batch), "--device", "cpu"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"transcribe failed ({proc.returncode}):\n{err[-3000:]}")
    return {"peak_rss_mb": usage.ru_maxrss / 1024, "wall_s": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--model", default="tiny-random",
                    help="tiny-random (default), 'default' (the packaged tiny.en) or a path")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--clip", choices=("speech", "silence"), default="speech",
                    help="silence: every row is read, checked and written but none reaches "
                         "the engine (what grows around the model, at a fraction of the time)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="oasr-mem-") as tmp:
        tmp = Path(tmp)
        model = args.model
        if model == "tiny-random":
            from tests.transcribe.conftest import write_tiny_bundle

            model = str(write_tiny_bundle(tmp / "tiny", window_s=2.0))
        elif model == "default":
            model = ""
        clip = _clip(tmp / "clip.wav", args.clip)
        results = []
        for n in args.sizes:
            manifest = _manifest(tmp / f"m{n}.jsonl", clip, n)
            out = tmp / f"out{n}.parquet"
            r = {"rows": n, **_run(manifest, out, model, args.batch_size)}
            import pyarrow.parquet as pq

            assert pq.ParquetFile(out).metadata.num_rows == n
            results.append(r)
            print(f"{n:>7} rows: peak RSS {r['peak_rss_mb']:7.1f} MB, {r['wall_s']:6.1f} s",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "clip": args.clip,
                                         "clip_s": CLIP_SECONDS,
                                         "batch_size": args.batch_size, "results": results},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
