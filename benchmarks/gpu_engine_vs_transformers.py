"""Whisper on a GPU: our engine against transformers' ``generate``, same audio, one process.

Our engine as configured by default on CUDA (paged decoder KV, decoder-step CUDA graphs, the
end-of-sequence check every 8 steps) and ``--variant`` runs with other decode options, against
transformers' ``WhisperForConditionalGeneration.generate`` (fp16, SDPA, greedy, the
checkpoint's suppression), at each batch size, on the bundled LibriSpeech utterances repeated
to at least ``--minutes`` of audio. Batch 1 runs on one pass of the utterances. Each system
first makes one untimed pass (our step graphs are captured per shape on first use). Ours
reports its KV storage, end-of-sequence interval and step-graph counters (captured shapes,
replays, eager steps, shapes over the capture budget).

    python benchmarks/gpu_engine_vs_transformers.py --bundle DIR --audio audio70.npz \\
        --out results.json

``--audio`` is an ``.npz`` with ``ids``, ``lengths`` and ``samples`` (int16, 16 kHz, the
utterances concatenated), so the GPU host needs no audio decoder. Transcripts of the first pass
are written too, to score here (WER needs the normalizer).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gpu_profile import read_audio  # this folder: the npz reader the GPU probes share

from oasr.bench.peers import TransformersWhisper

SR = 16000


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_ours(lm: Any, rows: list[tuple[str, np.ndarray]], batch: int,
             options: dict[str, str] | None = None) -> dict[str, Any]:
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request

    options = dict(options or {})
    # "engine.<field>=value" sets an EngineConfig field; the rest are decode options.
    engine_kw = {k[len("engine."):]: v.lower() == "true" if v.lower() in ("true", "false") else v
                 for k, v in options.items() if k.startswith("engine.")}
    decode = {k: v for k, v in options.items() if not k.startswith("engine.")}
    eng = ASREngine(EngineConfig(device="cuda", dtype="fp16", max_batch_size=batch,
                                 max_decode_slots=max(256, batch), decode_options=decode,
                                 **engine_kw), loaded=lm)
    # One untimed pass over the utterances at this batch size: step graphs are captured per
    # (rows, table width) shape on first use, as transformers' kernels warm up on theirs.
    list(eng.run(Request(f"warm{i}", a) for i, (_, a) in enumerate(rows)))
    requests = [Request(uid, audio) for uid, audio in rows]
    torch.cuda.reset_peak_memory_stats()
    sync()
    t0 = time.perf_counter()
    done: dict[str, float] = {}
    texts: dict[str, str] = {}
    tokens = 0
    for out in eng.run(requests):
        done[out.request_id] = time.perf_counter() - t0
        texts[out.request_id] = out.text
        tokens += len(out.token_ids)
    sync()
    wall = time.perf_counter() - t0
    graphs = getattr(eng.strategy, "step_graphs", None)
    return {"wall_s": wall, "texts": texts, "tokens": tokens,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "kv_storage": getattr(eng.strategy, "kv_storage", None),
            "eos_check_interval": eng.strategy.eos_check_interval,
            "step_graphs": None if graphs is None else
            {"captured": len(graphs.graphs), **dict(graphs.stats)}}


def run_transformers(lm: Any, rows: list[tuple[str, np.ndarray]], batch: int,
                     options: dict[str, str] | None = None) -> dict[str, Any]:
    tw = TransformersWhisper(lm, device="cuda", dtype=torch.float16,
                             attn_implementation="sdpa")
    decode = tw.transcribe_with_counts
    with torch.inference_mode():
        for i in range(0, max(batch, 70), batch):
            decode([a for _, a in rows[i:i + batch]])
        torch.cuda.reset_peak_memory_stats()
        sync()
        t0 = time.perf_counter()
        texts: dict[str, str] = {}
        tokens = 0
        for i in range(0, len(rows), batch):
            chunk = rows[i:i + batch]
            out, n = decode([a for _, a in chunk])
            tokens += n
            texts.update({uid: t for (uid, _), t in zip(chunk, out, strict=True)})
        sync()
    return {"wall_s": time.perf_counter() - t0, "texts": texts, "tokens": tokens,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--audio", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="1,16,64")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", action="append", default=[],
                    help="an extra run of ours: name:k=v,k=v (decode options; engine.<field>=v "
                         "for an EngineConfig field)")
    args = ap.parse_args()
    variants: list[tuple[str, Any, dict[str, str]]] = [("ours", run_ours, {})]
    for v in args.variant:
        name, _, opts = v.partition(":")
        variants.append((name, run_ours, dict(kv.split("=", 1) for kv in opts.split(",") if kv)))
    variants.append(("transformers", run_transformers, {}))

    from oasr.models.loader import load_pretrained

    lm = load_pretrained(str(args.bundle))
    base = read_audio(args.audio)
    base_s = sum(len(a) for _, a in base) / SR
    reps = max(1, int(np.ceil(args.minutes * 60 / base_s)))
    many = [(f"{uid}#{r}", a) for r in range(reps) for uid, a in base]
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "utterances": len(base), "repeats": reps, "runs": [], "transcripts": {},
    }
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        rows = base if batch == 1 else many
        audio_s = sum(len(a) for _, a in rows) / SR
        for name, fn, opts in variants:
            r = fn(lm, rows, batch, opts)
            entry = {"system": name, "options": opts, "batch": batch,
                     "audio_s": round(audio_s, 2),
                     "wall_s": round(r["wall_s"], 3), "rtfx": round(audio_s / r["wall_s"], 1),
                     "tokens_per_s": round(r["tokens"] / r["wall_s"], 1),
                     "peak_gib": round(r["peak_gib"], 3),
                     **{k: r[k] for k in ("kv_storage", "eos_check_interval", "step_graphs")
                        if k in r}}
            results["runs"].append(entry)
            print(json.dumps(entry), flush=True)
            key = f"{name}/{batch}"
            results["transcripts"][key] = {uid: t for uid, t in r["texts"].items()
                                           if uid.endswith("#0") or "#" not in uid}
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
