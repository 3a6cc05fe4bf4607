"""Concurrent real-time streams on one GPU: p50 / p99 partial latency against stream count.

    python benchmarks/gpu_stream_concurrency.py OUT_DIR --data DIR [--device cuda]
    python benchmarks/gpu_stream_concurrency.py OUT_DIR --data DIR --device cpu --small  # smoke

DIR holds ``librispeech-test-other-70/audio/*.flac`` (and optionally ``longform/*.flac``): each
stream plays one of these recordings (looped) in real time, streams staggered by a random
offset within one chunk so arrivals spread.

(a) ``conformer``: a WeNet Conformer, 12 layers x 256 (random weights, causal conv, dynamic
chunk), through the ``paged`` runtime: chunks of 16 encoder frames (640 ms of audio), 4 left
chunks; every stream whose next chunk's audio has arrived joins one ``forward_step`` cohort,
then the CTC head and the greedy argmax on the device. Features are computed once per
recording beforehand (the streaming frontend emits exactly the offline frames: tested in
tests/features), so the latency is the step's: the time from the arrival of a chunk's last
sample to its partial (CTC argmax on the host). N = 1, 16, 64, 256, 1000.

(b) ``whisper``: Whisper tiny.en (the packaged default) through the re-decode policy
(``StreamingRecognizer``, step 1 s, the energy gate): the latency is from the arrival of the
audio a decode reads up to, to the end of the ``decode_streams`` call that serves it.
N = 1, 4, 16, 32, 64.

Writes OUT_DIR/stream_concurrency.json (per model and N: p50 / p99 / mean latency in ms, the
partials served, steps, the mean cohort size, whether the stream kept up) and the largest N with
p99 < 100 ms, plus OUT_DIR/stream_concurrency.png when matplotlib imports (else a note in the
JSON).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from oasr.engine.paged_backend import PagedStreamingBackend
from oasr.features import FeatureConfig, build_extractor
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.model import ConformerModel

SR = 16000


def recordings(data: Path, limit: int) -> list[np.ndarray]:
    files = sorted((data / "librispeech-test-other-70" / "audio").glob("*.flac"))
    files += sorted((data / "longform").glob("*.flac"))
    if not files:
        raise SystemExit(f"no .flac under {data}/librispeech-test-other-70/audio or longform")
    out = []
    for f in files[:limit]:
        a, sr = sf.read(f, dtype="float32")
        if sr != SR:
            raise SystemExit(f"{f}: {sr} Hz, expected {SR}")
        out.append(a)
    return out


def percentiles(lat: list[float]) -> dict:
    if not lat:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None, "partials": 0}
    x = np.asarray(lat) * 1000.0
    return {"p50_ms": float(np.percentile(x, 50)), "p99_ms": float(np.percentile(x, 99)),
            "mean_ms": float(x.mean()), "partials": int(len(x))}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- (a) Conformer through the paged runtime ---------------------------------------------------
def conformer_model(small: bool, device: torch.device, dtype: torch.dtype) -> ConformerModel:
    torch.manual_seed(0)
    if small:
        cfg = ConformerConfig(d_model=64, encoder_layers=2, encoder_heads=4,
                              encoder_linear_units=128, vocab_size=500, causal=True,
                              use_dynamic_chunk=True, decoder_layers=1,
                              decoder_linear_units=64)
    else:
        cfg = ConformerConfig(d_model=256, encoder_layers=12, encoder_heads=4,
                              encoder_linear_units=2048, vocab_size=5000, causal=True,
                              use_dynamic_chunk=True, decoder_layers=1)
    return ConformerModel(cfg).eval().to(device, dtype)


def window_of(stream: dict, window: int, stride: int) -> torch.Tensor:
    """Chunk ``k``'s feature window, the recording looped (the encoder state just goes on)."""
    f = stream["f"]
    chunks = max(1, (f.shape[0] - window) // stride + 1)
    a = (stream["k"] % chunks) * stride
    return f[a:a + window]


def run_conformer(model, feats: list[torch.Tensor], n: int, seconds: float, device,
                  dtype, chunk: int, left: int, warm_s: float = 0.0) -> dict:
    """``warm_s``: the first seconds run untimed (a server is warm: the first steps at a new
    cohort width pay for allocator growth and kernel selection)."""
    enc = model.encoder
    enc.configure_streaming(chunk, left)
    be = PagedStreamingBackend(model, max_streams=n, device=device, dtype=dtype)
    rate, rc = enc.subsampling_rate, enc.right_context
    window, stride = (chunk - 1) * rate + rc + 1, chunk * rate
    t_warm = time.perf_counter()
    be.warm_up(window, feats[0].shape[1])  # every cohort bucket once, before streams arrive
    hop_s = 0.010
    rng = random.Random(n)
    streams = []
    for i in range(n):
        be.allocate(i)
        f = feats[i % len(feats)]
        streams.append({"f": f, "k": 0, "offset": rng.random() * stride * hop_s})
    lat: list[float] = []
    steps, rows = 0, 0
    t0 = time.perf_counter()
    timed_from = t0 + warm_s
    end = timed_from + seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        ready, arrivals = [], []
        for i, s in enumerate(streams):
            arrive = t0 + s["offset"] + (s["k"] * stride + window) * hop_s
            if arrive <= now:
                ready.append(i)
                arrivals.append(arrive)
        if not ready:
            time.sleep(0.001)
            continue
        x = torch.stack([window_of(streams[i], window, stride) for i in ready]).to(
            device, dtype, non_blocking=True)
        with torch.inference_mode():
            out, _ = be.forward_step(ready, x)
            best = model.ctc_log_probs(out).argmax(-1)
        best.cpu()  # the partial is on the host: this synchronizes
        done = time.perf_counter()
        for i in ready:
            streams[i]["k"] += 1  # a stream that fell behind has its next chunk already due
        if now < timed_from:
            continue
        lat += [done - a for a in arrivals]
        steps += 1
        rows += len(ready)
    audio_due = seconds / (stride * hop_s)
    served = rows / max(n, 1)
    res = percentiles(lat)
    res.update(streams=n, steps=steps, mean_cohort=rows / max(steps, 1),
               bucketed=be.bucket, warm_up_and_open_s=round(t0 - t_warm, 3),
               chunks_per_stream=served, chunks_due_per_stream=audio_due,
               kept_up=served >= 0.9 * audio_due - 1)
    for i in range(n):
        be.free(i)
    return res


# -- (b) Whisper through the re-decode policy --------------------------------------------------
def run_whisper(audios: list[np.ndarray], n: int, seconds: float, device: str,
                model: str) -> dict:
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.streaming import StreamingRecognizer, StreamOptions
    from oasr.streaming.detector import detect
    from oasr.streaming.redecode import next_job

    engine = ASREngine(EngineConfig(model=model, device=device, max_batch_size=max(16, n)))
    rec = StreamingRecognizer(engine, StreamOptions(step_s=1.0, max_step_s=5.0))
    rng = random.Random(n)
    streams = []
    for i in range(n):
        a = audios[i % len(audios)]
        streams.append({"s": rec.create_stream(), "a": np.tile(a, 1 + int(seconds * SR
                                                                          // len(a) + 1)),
                        "fed": 0, "offset": rng.random()})
    lat: list[float] = []
    steps = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        now = time.perf_counter()
        for st in streams:
            upto = int(max(0.0, now - t0 - st["offset"]) * SR)
            if upto > st["fed"]:
                st["s"].accept_waveform(SR, st["a"][st["fed"]:upto])
                st["fed"] = upto
        detect([st["s"] for st in streams])  # the endpoints the jobs depend on
        jobs = [(st, next_job(st["s"])) for st in streams]
        jobs = [(st, j) for st, j in jobs if j is not None]
        if not jobs:
            time.sleep(0.005)
            continue
        arrivals = [t0 + st["offset"] + j.end / SR for st, j in jobs]
        rec.decode_streams([st["s"] for st in streams])
        done = time.perf_counter()
        lat += [done - a for a in arrivals]
        steps += 1
        for st in streams:
            if rec.is_endpoint(st["s"]):
                rec.reset(st["s"])
    res = percentiles(lat)
    res.update(streams=n, steps=steps)
    return res


def largest_under(rows: list[dict], ms: float = 100.0) -> int | None:
    ok = [r["streams"] for r in rows if r["p99_ms"] is not None and r["p99_ms"] < ms
          and r.get("kept_up", True)]
    return max(ok) if ok else None


def plot(results: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not importable ({exc}); no plot"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in results.items():
        rows = [r for r in rows if r["p50_ms"] is not None]
        xs = [r["streams"] for r in rows]
        ax.plot(xs, [r["p50_ms"] for r in rows], "o-", label=f"{name} p50")
        ax.plot(xs, [r["p99_ms"] for r in rows], "s--", label=f"{name} p99")
    ax.axhline(100, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("concurrent real-time streams")
    ax.set_ylabel("partial latency (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--data", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny model, few streams (smoke)")
    ap.add_argument("--seconds", type=float, default=None, help="wall seconds per point")
    ap.add_argument("--counts", default=None, help="Conformer stream counts, comma-separated")
    ap.add_argument("--whisper-counts", default=None)
    ap.add_argument("--whisper-model", default="", help="default: the packaged tiny.en")
    ap.add_argument("--skip-whisper", action="store_true")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    if device.type == "cpu":
        torch.set_num_threads(1)
    seconds = args.seconds or (4.0 if args.small else 20.0)
    counts = [int(c) for c in (args.counts or ("1,4" if args.small else "1,16,64,256,1000"))
              .split(",")]
    wcounts = [int(c) for c in (args.whisper_counts or ("1" if args.small else "1,4,16,32,64"))
               .split(",")]
    audios = recordings(Path(args.data), 8 if args.small else 80)
    cfg = FeatureConfig(feature_type="fbank", sample_rate=SR, num_mel_bins=80)
    spec = build_extractor(cfg)
    feats = []
    for a in audios:
        f, _ = spec.fn(torch.from_numpy(a)[None], torch.tensor([len(a)]), cfg)
        feats.append(f[0].float())
    model = conformer_model(args.small, device, dtype)
    result: dict = {"device": str(device), "dtype": str(dtype), "seconds_per_point": seconds,
                    "chunk_frames": 16, "left_chunks": 4,
                    "untimed_warm_up_s_per_point": 1.0,
                    "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                    "conformer_config": {"d_model": model.encoder.cfg.d_model,
                                         "layers": model.encoder.cfg.encoder_layers}}
    rows = []
    for n in counts:
        r = run_conformer(model, feats, n, seconds, device, dtype, 16, 4, warm_s=1.0)
        print("conformer", r, flush=True)
        rows.append(r)
    result["conformer"] = rows
    result["conformer_max_streams_p99_under_100ms"] = largest_under(rows)
    del model
    if not args.skip_whisper:
        wrows = []
        for n in wcounts:
            r = run_whisper(audios, n, seconds, args.device, args.whisper_model)
            print("whisper", r, flush=True)
            wrows.append(r)
        result["whisper"] = wrows
        result["whisper_max_streams_p99_under_100ms"] = largest_under(wrows)
    note = plot({k: result[k] for k in ("conformer", "whisper") if k in result},
                out / "stream_concurrency.png")
    if note:
        result["plot"] = note
    (out / "stream_concurrency.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if "max" in k}, indent=2))


if __name__ == "__main__":
    main()
