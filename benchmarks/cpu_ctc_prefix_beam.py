"""CPU CTC prefix beam search: ours (``oasr._C.ctc``) vs pyctcdecode, no language model.

Input: random log-probs shaped like a CTC head's output, batch 16 x 200 frames (8 s at 40 ms)
x 5000 tokens, float32: each frame is a blank frame (60%, blank logit +10..14) or a token frame
(a token +9..13 over the blank's +3..7; half the token frames continue the previous token) over
N(0, 1) logits, then log-softmax. The frame's best token holds 0.86 of the mass on average
(median 0.93; recorded in the JSON as ``mean_top1_prob``).

What each side does per frame, at beam width 10:

- ours (WeNet's ``ctc_prefix_beam_search``): the frame's top 10 tokens extend the top 10
  prefixes; a prefix's blank- and token-ending mass is one entry (pb, pnb). No score-margin
  pruning. Timed at 1 thread and at every core (rows in parallel, GIL released).
- pyctcdecode ``decode_beams_batch(pool=None, ...)`` (a Python loop over rows), two settings:
  * ``defaults``: its per-frame candidates are the tokens with log-prob >= ``token_min_logp``
    (-5) plus the argmax, and beams more than ``beam_prune_logp`` (-10) below the best are
    dropped; on this input that is about 1.1 candidates per frame, far fewer than our 10;
  * ``matched``: exactly our candidate set. Outside the timing, every log-prob below the
    frame's top 10 is set to -1e4 (pyctcdecode clips it to log 1e-15), ``token_min_logp`` is -30
    (so the top 10 and only they expand) and ``beam_prune_logp`` is off. Its log-softmax then
    renormalises each frame over its top 10, which adds one constant per frame to every path
    and so changes no ranking.
  Its beams are (text, last char) pairs, so a prefix's blank- and token-ending halves occupy two
  of its 10 slots. Labels are 4999 distinct CJK characters (non-BPE mode, one character per
  token) so its text maps back to token ids exactly. It re-applies log-softmax to its input
  (inside its timing; a no-op on log-probs but a pass over B x T x V).

Reported per setting: median wall seconds over repeats for the whole batch, ms per utterance,
RTFx (audio seconds / wall seconds), and the fraction of rows whose best token sequence equals
ours at beam 10. Both sides read the same float32 array; results land in
``benchmarks/results/cpu_ctc_prefix_beam_<date>.json``.

Setup: pyctcdecode is not a dependency of oasr; install it into the venv first
(``pip install pyctcdecode``; it warns that kenlm is absent, which is fine without an LM).

Usage:
    python benchmarks/cpu_ctc_prefix_beam.py [--batch 16] [--frames 200] [--vocab 5000]
        [--beam 10] [--repeats 20] [--py-repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FRAME_SECONDS = 0.04


def make_log_probs(batch: int, frames: int, vocab: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((batch, frames, vocab)).astype(np.float32)
    for b in range(batch):
        tok = int(rng.integers(1, vocab))
        for t in range(frames):
            if rng.random() < 0.6:
                logits[b, t, 0] += rng.uniform(10.0, 14.0)
                continue
            if rng.random() < 0.5:
                tok = int(rng.integers(1, vocab))
            logits[b, t, tok] += rng.uniform(9.0, 13.0)
            logits[b, t, 0] += rng.uniform(3.0, 7.0)
    logits -= logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits).sum(-1, keepdims=True))
    return np.ascontiguousarray(logits - lse, dtype=np.float32)


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--py-repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from oasr.native import native

    ctc = native("ctc")
    import pyctcdecode

    logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
    lp = make_log_probs(args.batch, args.frames, args.vocab)
    lens = np.full(args.batch, args.frames, dtype=np.int64)
    audio_s = args.batch * args.frames * FRAME_SECONDS
    cores = os.cpu_count() or 1
    loadavg_start = list(os.getloadavg())

    def row(name: str, wall: float, extra: dict[str, Any]) -> dict[str, Any]:
        return {"system": name, "wall_s": round(wall, 6),
                "ms_per_utt": round(1000 * wall / args.batch, 4),
                "rtfx": round(audio_s / wall, 1), **extra}

    results = []
    ctc.prefix_beam(lp, lens, 0, args.beam, 1.0, 1)  # warm
    ours_best = None
    for threads in sorted({1, cores}):
        wall, hyps = timed(lambda t=threads: ctc.prefix_beam(lp, lens, 0, args.beam, 1.0, 1,
                                                             num_threads=t), args.repeats)
        ours_best = [h[0].tokens.tolist() for h in hyps]
        results.append(row(f"ours prefix_beam threads={threads}", wall,
                           {"beam": args.beam, "candidates_per_frame": args.beam}))
    wall, skipped = timed(lambda: ctc.prefix_beam(lp, lens, 0, args.beam, 0.98, 1,
                                                  num_threads=1), args.repeats)
    same = sum(h[0].tokens.tolist() == b for h, b in zip(skipped, ours_best)) / args.batch
    results.append(row("ours prefix_beam blank_skip_threshold=0.98 threads=1", wall,
                       {"beam": args.beam, "agree_with_ours": same}))
    wall, greedy = timed(lambda: ctc.greedy(lp, lens, 0), args.repeats)
    same = sum(h.tokens.tolist() == b for h, b in zip(greedy, ours_best)) / args.batch
    results.append(row("ours greedy threads=1", wall, {"agree_with_ours": same}))

    labels = [""] + [chr(0x4E00 + i) for i in range(args.vocab - 1)]
    decoder = pyctcdecode.build_ctcdecoder(labels)
    top = np.argpartition(-lp, args.beam - 1, axis=-1)[..., :args.beam]
    masked = np.full_like(lp, -1e4)
    np.put_along_axis(masked, top, np.take_along_axis(lp, top, axis=-1), axis=-1)
    settings = {
        "defaults": (lp, {"token_min_logp": -5.0, "beam_prune_logp": -10.0}),
        "matched": (masked, {"token_min_logp": -30.0, "beam_prune_logp": -1e30}),
    }
    for name, (x, kw) in settings.items():
        cand = float(((x >= kw["token_min_logp"]).sum(-1)).mean())
        wall, beams = timed(lambda x=x, kw=kw: decoder.decode_beams_batch(
            None, list(x), beam_width=args.beam, prune_history=False, **kw), args.py_repeats)
        best = [[ord(c) - 0x4E00 + 1 for c in b[0][0]] for b in beams]
        same = sum(a == b for a, b in zip(best, ours_best)) / args.batch
        results.append(row(f"pyctcdecode {name}", wall,
                           {"beam": args.beam, **kw, "candidates_per_frame": round(cand, 2),
                            "agree_with_ours": same}))

    report = {
        "benchmark": "cpu_ctc_prefix_beam",
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "data": {"batch": args.batch, "frames": args.frames, "vocab": args.vocab,
                 "audio_s": audio_s, "frame_seconds": FRAME_SECONDS,
                 "mean_top1_prob": round(float(np.exp(lp.max(-1)).mean()), 4),
                 "blank_argmax_fraction": round(float((lp.argmax(-1) == 0).mean()), 4)},
        "settings": {"beam": args.beam, "repeats": args.repeats,
                     "py_repeats": args.py_repeats, "timing": "median wall of the whole batch"},
        "environment": {"python": platform.python_version(),
                        "numpy": np.__version__, "pyctcdecode": pyctcdecode.__version__
                        if hasattr(pyctcdecode, "__version__") else "0.5.0",
                        "platform": platform.platform(), "cpu_count": cores},
        "loadavg_start": loadavg_start,
        "loadavg_end": list(os.getloadavg()),
        "results": results,
    }
    out = args.out or (REPO / "benchmarks" / "results" /
                       f"cpu_ctc_prefix_beam_{dt.date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'system':58s} {'wall_s':>9s} {'ms/utt':>9s} {'RTFx':>9s}  agree")
    for r in results:
        print(f"{r['system']:58s} {r['wall_s']:9.4f} {r['ms_per_utt']:9.3f} {r['rtfx']:9.0f}  "
              f"{r.get('agree_with_ours', '')}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
