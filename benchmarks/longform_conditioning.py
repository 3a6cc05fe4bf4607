"""Issue 17: long-form WER with and without Whisper's previous-text prompt.

    python benchmarks/longform_conditioning.py OUT.json [--device cuda] [--model M]
        [--temperature 0] [--temperature 0,0.2,0.4,0.6,0.8,1.0]

Runs, as a user would (subprocesses of this tree's CLI), for each ``--temperature`` given
(default: ``0`` and faster-whisper's fallback schedule):

    oasr transcribe librispeech-test-other-70.flac -o OUT.jsonl --temperature T \
        --no-condition-on-previous-text
    oasr transcribe librispeech-test-other-70.flac -o OUT.jsonl --temperature T \
        --condition-on-previous-text

and scores each transcript against the recording's ``.txt`` reference (whisper normalizer),
with the wall time and the run's finish reason.
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

from oasr import envs

REPO = Path(__file__).resolve().parents[1]
DATA = (envs.shared_data() or REPO.parent / "shared" / "data") / "longform"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/longform")
NAME = "librispeech-test-other-70"
SCHEDULE = "0,0.2,0.4,0.6,0.8,1.0"


def transcribe(audio: Path, out: Path, extra: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    args = [sys.executable, "-m", "oasr.cli.app", "transcribe", str(audio), "-o", str(out),
            "-f", "jsonl", "--no-progress", "--no-language-check", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(args, env=env, text=True, capture_output=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return time.perf_counter() - t0


def main() -> None:
    from oasr.metrics.wer import score

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="")
    ap.add_argument("--temperature", action="append")
    a = ap.parse_args()
    audio, reference = DATA / f"{NAME}.flac", (DATA / f"{NAME}.txt").read_text().strip()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for temperature in a.temperature or ["0", SCHEDULE]:
            for condition in (False, True):
                flag = ("--condition-on-previous-text" if condition
                        else "--no-condition-on-previous-text")
                out = Path(tmp) / f"{len(results)}.jsonl"
                extra = ["--device", a.device, "--temperature", temperature, flag]
                if a.model:
                    extra += ["--model", a.model]
                wall = transcribe(audio, out, extra)
                row = json.loads(out.read_text().splitlines()[0])
                wer = score({"long": reference}, {"long": row["text"]}, normalizer="whisper")
                results.append({"temperature": temperature,
                                "condition_on_previous_text": condition,
                                "wer": round(wer.wer, 4), "wall_s": round(wall, 1),
                                "finish_reason": row["finish_reason"],
                                "segments": len(row.get("segments") or [])})
                print(json.dumps(results[-1]), flush=True)
    Path(a.out).write_text(json.dumps({"audio": str(audio), "device": a.device,
                                       "model": a.model or "default (tiny.en)",
                                       "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
