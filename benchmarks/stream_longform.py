"""Issue 14's Done-when run: ``oasr stream`` vs ``oasr transcribe`` on the long-form recording.

    python benchmarks/stream_longform.py OUT.json [--device cuda] [--model M] [--seconds S]

Runs, as a user would (subprocesses of this tree's CLI):

    oasr stream  librispeech-test-other-70.flac --output finals.jsonl
    oasr transcribe librispeech-test-other-70.flac -o offline.jsonl -f jsonl

then scores the stream's finals (joined in order) and the offline transcript against the
``.txt`` reference (whisper normalizer), and records the stream's own summary line: first-text
latency (audio seconds after speech began) and commit lag (mean / p50 / p90), the wall times,
and the gap between the two WERs (Done when: within 1.5 points). ``--seconds S`` runs both on
the audio up to the end of the last utterance that ends within S s (``speech-edges.json``) and
scores those utterances.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf

from oasr import envs

REPO = Path(__file__).resolve().parents[1]
DATA = (envs.shared_data() or REPO.parent / "shared" / "data") / "longform"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/longform")
NAME = "librispeech-test-other-70"


def cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "oasr.cli.app", *args], env=env, text=True,
                          capture_output=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"oasr {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc, wall


def summary_numbers(stderr: str) -> dict:
    out = {}
    m = re.search(r"commit lag \(audio s\) mean ([\d.]+), p50 ([\d.]+), p90 ([\d.]+)", stderr)
    if m:
        out["commit_lag_s"] = {"mean": float(m[1]), "p50": float(m[2]), "p90": float(m[3])}
    m = re.search(r"first text ([\d.]+) s of audio after speech began", stderr)
    if m:
        out["first_partial_latency_s"] = float(m[1])
    m = re.search(r"\((\d+) decodes, ([\w-]+)\)", stderr)
    if m:
        out["decodes"], out["runtime"] = int(m[1]), m[2]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model", default="")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--vad", default="silero")
    args = ap.parse_args()
    from oasr.metrics.wer import score

    audio_path = DATA / f"{NAME}.flac"
    ref_text = (DATA / f"{NAME}.txt").read_text().strip()
    common = ["--device", args.device] + (["--model", args.model] if args.model else [])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = audio_path
        if args.seconds:
            # Cut at the end of the last whole utterance inside S: both runs hear the same
            # audio and the reference covers all of it.
            edges = json.loads((DATA / f"{NAME}.speech-edges.json").read_text())
            whole = [e for e in edges if e["end"] <= args.seconds]
            if not whole:
                raise SystemExit(f"no whole utterance ends within {args.seconds} s")
            audio, sr = sf.read(audio_path, dtype="float32")
            src = tmp / "slice.flac"
            sf.write(src, audio[: int(whole[-1]["end"] * sr)], sr)
            ref_text = " ".join(e["text"] for e in whole)
        finals = tmp / "finals.jsonl"
        offline = tmp / "offline.jsonl"
        proc, stream_wall = cli("stream", str(src), "--output", str(finals), "--vad", args.vad,
                                *common)
        _, offline_wall = cli("transcribe", str(src), "-o", str(offline), "-f", "jsonl",
                              "--no-progress", *common)
        rows = [json.loads(x) for x in finals.read_text().splitlines() if x.strip()]
        stream_text = " ".join(r["text"] for r in rows)
        off_rows = [json.loads(x) for x in offline.read_text().splitlines() if x.strip()]
        offline_text = " ".join(r.get("text", "") for r in off_rows)
    s = score({"rec": ref_text}, {"rec": stream_text})
    o = score({"rec": ref_text}, {"rec": offline_text})
    result = {
        "audio": str(audio_path), "seconds": args.seconds, "device": args.device,
        "model": args.model or "default", "vad": args.vad,
        "stream": {"wer": s.wer, "substitutions": s.substitutions, "deletions": s.deletions,
                   "insertions": s.insertions, "finals": len(rows), "wall_s": stream_wall,
                   **summary_numbers(proc.stderr)},
        "offline": {"wer": o.wer, "wall_s": offline_wall},
        "wer_gap_points": 100.0 * (s.wer - o.wer),
        "done_when_within_1_5_points": 100.0 * (s.wer - o.wer) <= 1.5,
        "stream_summary_line": proc.stderr.strip().splitlines()[-1] if proc.stderr else "",
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
