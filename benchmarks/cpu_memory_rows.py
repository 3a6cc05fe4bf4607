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

``--clip librispeech`` is what users run: real short speech, each row one whole utterance of
the 70 LibriSpeech test-other utterances in ``shared/data`` (repeated with unique ids), embedded
as bytes in a Hugging Face-layout Parquet manifest (``audio: struct<bytes, path>``), the
packaged tiny.en with its defaults (word timings on), ``--threads 1``. The process's RSS is also
sampled every second (``/proc/<pid>/status``), so growth shows as a curve, not only a peak.

    python benchmarks/cpu_memory_rows.py                       # 1k, 10k, 100k rows
    python benchmarks/cpu_memory_rows.py --sizes 1000 10000    # shorter
    python benchmarks/cpu_memory_rows.py --clip silence        # no engine work: fast
    python benchmarks/cpu_memory_rows.py --clip librispeech --model default --threads 1 \
        --sizes 100 1000                                       # real speech, tiny.en
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


def _speech_manifest(path: Path, rows: int) -> Path:
    """``rows`` rows of real speech: the 70 LibriSpeech utterances in turn, each embedded whole
    (HF layout), ids ``<utterance>-r<repeat>`` so every row is its own resume key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.helpers.data import SHARED_DATA

    folder = SHARED_DATA / "librispeech-test-other-70"
    refs = dict(line.split("\t")[0::2] for line in
                (folder / "transcripts.tsv").read_text().splitlines()[1:])
    files = sorted((folder / "audio").glob("*.flac"))
    if not files:
        raise SystemExit(f"--clip librispeech needs the shared data at {folder}")
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    blobs = {f: f.read_bytes() for f in files}
    with pq.ParquetWriter(path, pa.schema([("id", pa.string()), ("audio", audio),
                                           ("text", pa.string())])) as writer:
        for start in range(0, rows, 1000):
            ks = range(start, min(rows, start + 1000))
            picked = [files[k % len(files)] for k in ks]
            writer.write_table(pa.table({
                "id": [f"{f.stem}-r{k // len(files):04d}" for f, k in zip(picked, ks)],
                "audio": pa.array([{"bytes": blobs[f], "path": f.name} for f in picked],
                                  type=audio),
                "text": [refs.get(f.stem, "") for f in picked]}))
    return path


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _run(manifest: Path, out: Path, model: str, args: argparse.Namespace) -> dict:
    batch, threads = args.batch_size, args.threads
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "oasr.cli.app", "transcribe", str(manifest), "-o", str(out),
           "--model", model, "--no-progress", "--device", args.device]
    if batch is not None:
        cmd += ["--batch-size", str(batch)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=err_file)
        samples = []  # (seconds since start, RSS MB), about one a second
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # reaps it: not proc.poll()
            if pid:
                break
            rss = _rss_mb(proc.pid)
            if rss is not None:
                samples.append((round(time.perf_counter() - start, 1), round(rss, 1)))
            time.sleep(1.0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"transcribe failed ({code}):\n{err[-3000:]}")
    return {"peak_rss_mb": usage.ru_maxrss / 1024, "wall_s": time.perf_counter() - start,
            "rss_timeline_mb": samples[:: max(1, len(samples) // 200)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--model", default="tiny-random",
                    help="tiny-random (default), 'default' (the packaged tiny.en) or a path")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="-b of the command (default: its own, 16 on CPU)")
    ap.add_argument("--threads", type=int, default=None, help="--threads of the command")
    ap.add_argument("--clip", choices=("speech", "silence", "librispeech"), default="speech",
                    help="silence: every row is read, checked and written but none reaches "
                         "the engine (what grows around the model, at a fraction of the time); "
                         "librispeech: each row a whole real utterance (see above)")
    ap.add_argument("--device", default="cpu",
                    help="--device of the command: cuda measures the host memory of the GPU "
                         "path (the rows, the writer, the prefetch) at sizes a CPU cannot reach")
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
        clip = None if args.clip == "librispeech" else _clip(tmp / "clip.wav", args.clip)
        results = []
        for n in args.sizes:
            if clip is None:
                manifest = _speech_manifest(tmp / f"m{n}.parquet", n)
            else:
                manifest = _manifest(tmp / f"m{n}.jsonl", clip, n)
            out = tmp / f"out{n}.parquet"
            r = {"rows": n, **_run(manifest, out, model, args)}
            import pyarrow.parquet as pq

            assert pq.ParquetFile(out).metadata.num_rows == n
            results.append(r)
            print(f"{n:>7} rows: peak RSS {r['peak_rss_mb']:7.1f} MB, {r['wall_s']:6.1f} s",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "clip": args.clip,
                                         "clip_s": None if clip is None else CLIP_SECONDS,
                                         "batch_size": args.batch_size,
                                         "threads": args.threads, "device": args.device,
                                         "results": results},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
