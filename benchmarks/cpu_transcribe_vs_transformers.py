"""CPU throughput and accuracy: our engine vs transformers, Whisper tiny.en, fp32, greedy.

Both sides run in this one process on the same decoded audio (the bundled 70 LibriSpeech
test-other utterances), with the same weights (our converter's, loaded into transformers by
``scripts/make_transformers_reference.py``), the same prompt, suppression lists and
``max_new_tokens``, and the same torch thread count. Timed per side and batch size:

- ours: ``ASREngine.run`` over all requests (features, encoder, decoding, detokenization);
- transformers: ``WhisperFeatureExtractor`` + ``WhisperForConditionalGeneration.generate``
  (greedy, ``num_beams=1``) + decoding the ids, in batches of utterances sorted by duration
  (our scheduler groups similar lengths too, so neither side pads more than it must).

Audio decoding is outside the timings for both. RTFx = audio seconds / wall seconds. WER uses
``oasr.metrics.wer.score`` with the whisper normalizer against the LibriSpeech references;
"identical" is the fraction of utterances whose two transcripts are the same string.

The load average is recorded before and after each timed run: on a shared machine the numbers
are only comparable within one file.

Usage:
    python benchmarks/cpu_transcribe_vs_transformers.py [--batch-sizes 8,16] [--threads 2]
        [--limit N] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from make_transformers_reference import (  # noqa: E402
    DEFAULT_MANIFEST,
    MAX_NEW_TOKENS,
    TransformersWhisper,
    read_manifest,
)

WARMUP_ROWS = 2


def run_ours(lm: Any, rows: list[tuple], batch_size: int) -> tuple[float, dict[str, str]]:
    """(wall seconds, {id: text}) for our engine over ``rows``."""
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request

    cfg = EngineConfig(device="cpu", dtype="fp32", max_batch_size=batch_size,
                       max_new_tokens=MAX_NEW_TOKENS)
    eng = ASREngine(cfg, loaded=lm)
    requests = [Request(uid, audio) for uid, audio, *_ in rows]
    t0 = time.perf_counter()
    outs = list(eng.run(requests))
    wall = time.perf_counter() - t0
    errors = [(o.request_id, o.error) for o in outs if o.error]
    if errors:
        raise RuntimeError(f"our engine failed on {len(errors)} requests: {errors[:3]}")
    return wall, {o.request_id: o.text.strip() for o in outs}


def run_transformers(tw: TransformersWhisper, rows: list[tuple], batch_size: int
                     ) -> tuple[float, dict[str, str]]:
    """(wall seconds, {id: text}) for transformers over ``rows``, batched by duration."""
    ordered = sorted(rows, key=lambda r: -r[2])
    out: dict[str, str] = {}
    t0 = time.perf_counter()
    for i in range(0, len(ordered), batch_size):
        batch = ordered[i:i + batch_size]
        texts = tw.transcribe([r[1] for r in batch])
        out.update({r[0]: t for r, t in zip(batch, texts, strict=True)})
    return time.perf_counter() - t0, out


def summarize(name: str, wall: float, audio_s: float, hyps: dict[str, str],
              refs: dict[str, str], load: tuple[tuple, tuple]) -> dict[str, Any]:
    from oasr.metrics.wer import score

    res = score(refs, hyps, normalizer="whisper")
    return {
        "system": name,
        "wall_s": round(wall, 3),
        "rtfx": round(audio_s / wall, 3),
        "wer": round(res.wer, 5),
        "wer_errors": res.errors,
        "ref_words": res.ref_words,
        "loadavg_before": [round(x, 2) for x in load[0]],
        "loadavg_after": [round(x, 2) for x in load[1]],
    }


def timed(fn: Any, *args: Any) -> tuple[float, dict[str, str], tuple[tuple, tuple]]:
    before = os.getloadavg()
    wall, hyps = fn(*args)
    return wall, hyps, (before, os.getloadavg())


def print_table(results: list[dict[str, Any]]) -> None:
    head = f"{'batch':>5}  {'system':<12} {'wall s':>8} {'RTFx':>7} {'WER %':>7} {'identical':>9}"
    print(head)
    print("-" * len(head))
    for r in results:
        for side in ("ours", "transformers"):
            s = r[side]
            print(f"{r['batch_size']:>5}  {side:<12} {s['wall_s']:>8.1f} {s['rtfx']:>7.2f} "
                  f"{100 * s['wer']:>7.2f} {r['identical_fraction']:>9.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    ap.add_argument("--batch-sizes", default="8,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="first N utterances only")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]

    import transformers

    from oasr.models.loader import DEFAULT_MODEL, load_pretrained

    load_start = os.getloadavg()
    lm = load_pretrained()
    tw = TransformersWhisper(lm)
    rows = read_manifest(args.manifest)[:args.limit]
    refs = {r[0]: r[3] for r in rows}
    audio_s = sum(len(r[1]) for r in rows) / lm.feature_config.sample_rate

    # Warm both paths (allocator, first-call dispatch) on the shortest utterances.
    warm = sorted(rows, key=lambda r: r[2])[:WARMUP_ROWS]
    run_ours(lm, warm, WARMUP_ROWS)
    run_transformers(tw, warm, WARMUP_ROWS)

    results = []
    for bs in batch_sizes:
        w_ours, h_ours, l_ours = timed(run_ours, lm, rows, bs)
        print(f"batch {bs}: ours {w_ours:.1f} s", flush=True)
        w_hf, h_hf, l_hf = timed(run_transformers, tw, rows, bs)
        print(f"batch {bs}: transformers {w_hf:.1f} s", flush=True)
        same = [uid for uid in refs if h_ours.get(uid) == h_hf.get(uid)]
        results.append({
            "batch_size": bs,
            "ours": summarize("ours", w_ours, audio_s, h_ours, refs, l_ours),
            "transformers": summarize("transformers", w_hf, audio_s, h_hf, refs, l_hf),
            "speedup": round(w_hf / w_ours, 3),
            "identical_fraction": round(len(same) / len(refs), 4),
            "differing": {uid: {"ours": h_ours.get(uid), "transformers": h_hf.get(uid)}
                          for uid in refs if uid not in same},
        })

    now = dt.datetime.now(dt.timezone.utc)
    argv = [Path(sys.argv[0]).as_posix()] + sys.argv[1:]
    report = {
        "benchmark": "cpu_transcribe_vs_transformers",
        "date_utc": now.isoformat(timespec="seconds"),
        "command": "python " + " ".join(shlex.quote(a) for a in argv),
        "model": f"{DEFAULT_MODEL} (Whisper tiny.en), weights_sha256={lm.weights_sha256}",
        "data": {"manifest": os.path.relpath(args.manifest, REPO), "utterances": len(rows),
                 "audio_s": round(audio_s, 3)},
        "settings": {"device": "cpu", "dtype": "float32", "decoding": "greedy",
                     "max_new_tokens": MAX_NEW_TOKENS, "torch_threads": args.threads,
                     "warmup_utterances": WARMUP_ROWS, "wer_normalizer": "whisper"},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__,
                        "platform": platform.platform(), "processor": platform.processor(),
                        "cpu_count": os.cpu_count()},
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    out = args.out or REPO / "benchmarks" / "results" / (
        f"cpu_whisper_tiny_en_{now.date().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print()
    print_table(results)
    print(f"\nload average start {report['loadavg_start']} end {report['loadavg_end']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
