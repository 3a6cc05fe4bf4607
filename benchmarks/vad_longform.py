"""Speech detectors on ``../shared/data/longform``: speed, segment boundaries, WER and RTFx.

The recording is 70 LibriSpeech test-other utterances joined with 0.6 s silences (9.5 min);
``.speech-edges.json`` gives each utterance's first and last speech instant. For each detector:

- speed: the detector alone over ``--batch`` copies of the recording in one batched call
  (hours of audio per second of wall time; the median of ``--reps`` calls after a warm-up; on
  a shared CPU the process CPU time is recorded too, being less sensitive to other load);
- boundaries: the presegmenter's segments (``vad_segments.PRESEGMENT``, no length cap) against
  the speech edges: each edge's distance to the nearest segment boundary, and frame-level
  (10 ms) recall / precision of speech;
- ASR: ``oasr transcribe`` on the recording with ``--vad`` each of ``--vad`` (the packaged
  Whisper tiny.en, greedy), WER against the ``.txt`` reference and RTFx (audio / wall);
- gating: 30 s of digital silence, white noise and music-like tones, with and without the VAD.

Usage:
    python benchmarks/vad_longform.py [--device cpu|cuda] [--vad silero,fsmn,none]
        [--batch 8] [--skip-asr] [--out JSON]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from oasr import envs

REPO = Path(__file__).resolve().parent.parent
LONGFORM = (envs.shared_data() or REPO.parent / "shared" / "data") / "longform"
STEM = "librispeech-test-other-70"
SR = 16000


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def detector_speed(name: str, audio: np.ndarray, device: str, batch: int, reps: int) -> dict:
    from oasr.vad import build_detector

    det = build_detector(name, device=device)
    x = torch.from_numpy(audio)[None].repeat(batch, 1).to(device)
    lengths = torch.full((batch,), x.shape[1])
    det.detect(x, lengths, SR)  # warm-up: weights, caches, kernels
    times, cpu = [], []
    for _ in range(reps):
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        det.detect(x, lengths, SR)
        _sync(device)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    wall = statistics.median(times)
    hours = batch * len(audio) / SR / 3600.0
    return {"batch": batch, "audio_hours": hours, "median_s": wall,
            "median_cpu_s": statistics.median(cpu),
            "hours_per_second": hours / wall, "rtfx": hours * 3600.0 / wall}


def boundaries(name: str, audio: np.ndarray, edges: list[dict]) -> dict:
    from oasr.transcribe.vad_segments import build_recording_segmenter

    seg = build_recording_segmenter(name)
    t0 = time.perf_counter()
    rec = seg(audio, SR, max_segment_s=float("inf"))
    wall = time.perf_counter() - t0
    bounds_start = np.array([s for s, _ in rec.segments])
    bounds_end = np.array([e for _, e in rec.segments])
    start_err = [float(np.min(np.abs(bounds_start - e["speech_start"]))) for e in edges]
    end_err = [float(np.min(np.abs(bounds_end - e["speech_end"]))) for e in edges]
    # Frame-level speech overlap at 10 ms (the segments are padded, so precision < 1 is by design).
    n = int(len(audio) / SR * 100)
    ref = np.zeros(n, bool)
    hyp = np.zeros(n, bool)
    for e in edges:
        ref[int(e["speech_start"] * 100):int(e["speech_end"] * 100)] = True
    for s, e in rec.segments:
        hyp[int(s * 100):int(e * 100)] = True
    # Unpadded edges: the raw speech frames, without the segmenter's 400 ms padding.
    from dataclasses import replace

    raw = replace(seg.config, speech_pad_ms=0.0)
    seg.config = raw
    rec_raw = seg(audio, SR, max_segment_s=float("inf"))
    raw_start = np.array([s for s, _ in rec_raw.segments])
    raw_end = np.array([e for _, e in rec_raw.segments])
    return {
        "segments": len(rec.segments), "reference_utterances": len(edges),
        "segmenter_wall_s": wall,
        "padded_start_err_median_s": statistics.median(start_err),
        "padded_end_err_median_s": statistics.median(end_err),
        "raw_start_err_median_s": statistics.median(
            [float(np.min(np.abs(raw_start - e["speech_start"]))) for e in edges]),
        "raw_end_err_median_s": statistics.median(
            [float(np.min(np.abs(raw_end - e["speech_end"]))) for e in edges]),
        "raw_start_err_p90_s": float(np.percentile(
            [np.min(np.abs(raw_start - e["speech_start"])) for e in edges], 90)),
        "raw_end_err_p90_s": float(np.percentile(
            [np.min(np.abs(raw_end - e["speech_end"])) for e in edges], 90)),
        "speech_recall": float((ref & hyp).sum() / ref.sum()),
        "speech_precision": float((ref & hyp).sum() / max(hyp.sum(), 1)),
    }


def transcribe_file(path: Path, vad: str, device: str, word_timestamps: bool = False) -> tuple:
    import pyarrow.parquet as pq

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.io import OutputWriter
    from oasr.transcribe.runner import TranscribeOptions, transcribe
    from oasr.transcribe.vad_segments import VadTranscriber, build_recording_segmenter

    engine = ASREngine(EngineConfig(device=device, dtype="fp32" if device == "cpu" else "auto"))
    options = TranscribeOptions(inputs=[str(path)], word_timestamps=word_timestamps)
    transcriber = None
    if vad != "none":
        transcriber = VadTranscriber(engine, options, build_recording_segmenter(vad, device))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.parquet"
        t0, c0 = time.perf_counter(), time.process_time()
        stats = transcribe(engine, options, OutputWriter(out, "parquet"), transcriber=transcriber)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        row = pq.read_table(out).to_pylist()[0]
    vad_s = transcriber.vad_s if transcriber is not None else 0.0
    return row, wall, cpu, stats.audio_s, vad_s


def gating_signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(30 * SR) / SR
    notes = 220.0 * 2 ** (np.array([0, 4, 7, 12, 7, 4, 0, 5]) / 12)  # an arpeggio, 0.5 s a note
    f = notes[(t / 0.5).astype(int) % len(notes)]
    tones = 0.2 * (np.sin(2 * np.pi * f * t) + 0.5 * np.sin(2 * np.pi * 2 * f * t)
                   + 0.25 * np.sin(2 * np.pi * 3 * f * t)) / 1.75
    envelope = np.minimum(1.0, 20 * ((t / 0.5) % 1.0))  # a soft attack per note
    return {"silence": np.zeros(30 * SR, np.float32),
            "white_noise": (0.1 * rng.standard_normal(30 * SR)).astype(np.float32),
            "tones": (tones * envelope).astype(np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--vad", default="silero,fsmn,none")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's own)")
    ap.add_argument("--skip-asr", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from oasr.metrics.wer import score

    flac = LONGFORM / f"{STEM}.flac"
    audio, sr = sf.read(flac, dtype="float32")
    assert sr == SR
    edges = json.loads((LONGFORM / f"{STEM}.speech-edges.json").read_text())
    reference = (LONGFORM / f"{STEM}.txt").read_text().strip()
    vads = [v for v in args.vad.split(",") if v]
    result: dict = {"device": args.device, "torch_threads": torch.get_num_threads(),
                    "platform": platform.processor() or platform.machine(),
                    "audio_s": len(audio) / SR, "detectors": {}, "asr": {}, "gating": {}}
    if args.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name()
    for name in (v for v in vads if v != "none"):
        result["detectors"][name] = {
            "speed": detector_speed(name, audio, args.device, args.batch, args.reps),
            "boundaries": boundaries(name, audio, edges),
        }
        print(name, json.dumps(result["detectors"][name], indent=1), flush=True)
    if not args.skip_asr:
        for vad in vads:
            row, wall, cpu, audio_s, vad_s = transcribe_file(flac, vad, args.device)
            wer = score({"long": reference}, {"long": row["text"] or ""}).wer
            result["asr"][vad] = {"wer": wer, "wall_s": wall, "cpu_s": cpu,
                                  "rtfx": audio_s / wall, "rtfx_cpu": audio_s / cpu,
                                  "vad_s": vad_s, "segments": len(row["segments"] or []),
                                  "text": row["text"]}
            print(vad, result["asr"][vad], flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            for kind, signal in gating_signals().items():
                path = Path(tmp) / f"{kind}.wav"
                sf.write(path, signal, SR)
                result["gating"][kind] = {}
                for vad in vads:
                    row, *_ = transcribe_file(path, vad, args.device)
                    result["gating"][kind][vad] = {"text": row["text"],
                                                   "finish_reason": row["finish_reason"]}
                print(kind, result["gating"][kind], flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
