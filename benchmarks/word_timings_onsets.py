"""What the speech-edges reference calls an utterance's onset, next to where our first word
starts: a diagnosis aid for ``word_timings_longform.py`` results.

For each utterance: the reference onset (``speech_start`` of ``.speech-edges.json``) relative to
the segment's start in the joined recording, the first run of frames above the reference
threshold (the same rule as ``../shared/tools/speech_edges.py``: 10 ms frames louder than
max(segment peak - 35 dB, segment floor + 12 dB) for >= 3 frames), its loudest frame, how long
the audio stays under the threshold after it, and the onset of the first sustained run (one not
followed by ``--isolated-gap-s`` or more under the threshold; an isolated burst of a few frames
at the cut of a LibriSpeech file is a click or a breath, not the first word). With ``--result``
(a ``word_timings_longform.py`` JSON) it adds our first word's start and scores it against both
onsets.

Usage:
    python benchmarks/word_timings_onsets.py --result benchmarks/results/X.json [--data DIR]
        [--arm oasr] [--isolated-gap-s 0.1] [--out JSON]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from oasr import envs

REPO = Path(__file__).resolve().parent.parent
DATA = envs.shared_data() or REPO.parent / "shared" / "data"
NAME = "librispeech-test-other-70"


def frame_energy(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    hop = sample_rate // 100
    n = len(audio) // hop
    frames = audio[:n * hop].reshape(n, hop).astype(np.float64)
    return 10 * np.log10(np.maximum((frames ** 2).mean(1), 1e-12))


def onset_structure(energy: np.ndarray, start_s: float, end_s: float, onset_s: float,
                    isolated_gap_s: float) -> dict:
    a, b = int(start_s * 100), min(int(end_s * 100), len(energy))
    seg = energy[a:b]
    thr = max(seg.max() - 35, np.percentile(seg, 5) + 12)
    loud = seg > thr
    sustained = np.convolve(loud.astype(int), np.ones(3, int), "valid") == 3
    i = int(round(onset_s * 100)) - a
    run = 0
    while i + run < len(loud) and loud[i + run]:
        run += 1
    gap = 0
    while i + run + gap < len(loud) and not loud[i + run + gap]:
        gap += 1
    # The first >= 3-frame run not followed by isolated_gap_s under the threshold.
    alt = None
    for k in np.flatnonzero(sustained):
        r = k
        while r < len(loud) and loud[r]:
            r += 1
        g = r
        while g < len(loud) and not loud[g]:
            g += 1
        if (g - r) * 0.01 < isolated_gap_s - 1e-9 or g >= len(loud):
            alt = (a + k) / 100
            break
    return {"threshold_db": round(float(thr), 1), "onset_after_cut_s": round(onset_s - start_s, 3),
            "first_run_s": round(run * 0.01, 2),
            "first_run_peak_db": round(float(seg[i:i + max(run, 1)].max()), 1),
            "under_threshold_after_s": round(gap * 0.01, 2),
            "sustained_onset_s": float(alt) if alt is not None else onset_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--result", default=None)
    ap.add_argument("--arm", default="oasr")
    ap.add_argument("--isolated-gap-s", type=float, default=0.1)
    ap.add_argument("--tolerance", type=float, default=0.2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    longform = Path(args.data) / "longform"
    audio, sr = sf.read(longform / f"{NAME}.flac", dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(1)
    energy = frame_energy(audio, sr)
    edges = json.loads((longform / f"{NAME}.speech-edges.json").read_text())
    ours = {}
    if args.result:
        res = json.loads(Path(args.result).read_text())["results"][args.arm]
        ours = {u["id"]: u for u in res["per_utterance"]}
    rows = []
    for u in edges:
        row = {"id": u["id"], "speech_start": u["speech_start"],
               **onset_structure(energy, u["start"], u["end"], u["speech_start"],
                                 args.isolated_gap_s)}
        if u["id"] in ours:
            o = ours[u["id"]]
            first = u["speech_start"] + o["start_error_s"]
            row.update(first_word_s=round(first, 2), start_error_s=o["start_error_s"],
                       start_error_vs_sustained_s=round(first - row["sustained_onset_s"], 2),
                       end_error_s=o["end_error_s"])
        rows.append(row)
    summary = {"utterances": len(rows),
               "onset_within_30ms_of_cut": int(sum(r["onset_after_cut_s"] <= 0.03 for r in rows)),
               "onset_is_isolated_burst": int(sum(r["sustained_onset_s"] != r["speech_start"]
                                                  for r in rows))}
    if ours:
        tol = args.tolerance + 1e-9
        for key in ("start_error_s", "start_error_vs_sustained_s"):
            errs = [r[key] for r in rows if key in r]
            summary[f"{key}: within_{args.tolerance}s"] = round(
                float(np.mean([abs(e) <= tol for e in errs])), 4)
            summary[f"{key}: both_within_{args.tolerance}s"] = round(float(np.mean(
                [abs(r[key]) <= tol and abs(r["end_error_s"]) <= tol for r in rows
                 if key in r])), 4)
            summary[f"{key}: median"] = round(float(np.median(errs)), 3)
    for r in rows:
        if r["sustained_onset_s"] != r["speech_start"] or abs(r.get("start_error_s", 0)) > 0.2:
            print(json.dumps(r))
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"isolated_gap_s": args.isolated_gap_s,
                                              "summary": summary, "per_utterance": rows},
                                             indent=1) + "\n")


if __name__ == "__main__":
    main()
