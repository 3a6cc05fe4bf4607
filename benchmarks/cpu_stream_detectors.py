"""Which frame detector should ``oasr stream`` endpoint with: the energy gate or Silero?

Per detector, over the first ``--seconds`` of the long-form recording: the share of frames
inside the reference speech spans (``speech-edges.json``) called speech (recall) and the share
of frames in the gaps between utterances called silence; then 10 s of white noise at -30 dBFS
(a fan, a noisy room): the share of its frames called speech (false alarms). Writes JSON.

    python benchmarks/cpu_stream_detectors.py benchmarks/results/OUT.json [--seconds 180]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from oasr.streaming.detector import build_pool

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "longform"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/longform")


def classify(name: str, audio: np.ndarray, sr: int) -> tuple[np.ndarray, int, float]:
    pool = build_pool(name, sr)  # what ``oasr stream --vad NAME`` runs, one stream
    pool.open(0)
    fs = pool.frame_samples
    n = len(audio) // fs
    t0 = time.perf_counter()
    probs = np.concatenate([pool.probabilities({0: audio[a * fs:min(a + 500, n) * fs]})[0]
                            for a in range(0, n, 500)])
    return probs >= 0.5, fs, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=180.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    audio, sr = sf.read(DATA / "librispeech-test-other-70.flac", dtype="float32")
    audio = audio[: int(args.seconds * sr)]
    edges = json.loads((DATA / "librispeech-test-other-70.speech-edges.json").read_text())
    noise = (np.random.default_rng(0).standard_normal(10 * sr) * 10 ** (-30 / 20)).astype(
        np.float32)
    results = {}
    for name in ("energy", "silero"):
        speech, fs, secs = classify(name, audio, sr)
        t = (np.arange(len(speech)) + 0.5) * fs / sr
        inside = np.zeros(len(speech), bool)
        for e in edges:
            inside |= (t >= e["speech_start"]) & (t < e["speech_end"])
        gaps = ~inside
        noisy, _, _ = classify(name, noise, sr)
        results[name] = {
            "speech_recall": float(speech[inside].mean()),
            "gap_silence": float((~speech[gaps]).mean()) if gaps.any() else None,
            "gap_frames": int(gaps.sum()),
            "white_noise_-30dBFS_false_speech": float(noisy.mean()),
            "seconds_of_compute": secs,
            "frame_ms": 1000.0 * fs / sr,
        }
        print(name, results[name], flush=True)
    Path(args.out).write_text(json.dumps({"audio_seconds": args.seconds, "detectors": results},
                                         indent=2))


if __name__ == "__main__":
    main()
