"""Nemotron streaming RNN-T through the stream API on a GPU: step latency against stream count.

    python benchmarks/gpu_nemotron_stream.py OUT.json [--device cuda] [--streams 1,16,64,256]
    python benchmarks/gpu_nemotron_stream.py OUT.json --device cpu --small --streams 1,4  # smoke

The model has the shape of transformers' ``NemotronAsrStreamingConfig`` defaults (the
nemotron-speech-streaming 0.6b: cache-aware FastConformer 24 x 1024, 8 heads, 4096 FFN, kernel
9, 80 mels, 8x subsampling, left context 70; LSTM predictor 2 x 640; 1024 tokens + blank) with
random weights (none are available here), written as a native bundle and loaded by
``ASREngine``. N streams are created on one ``StreamingRecognizer`` (endpointing off); each
round every stream receives one chunk of audio (``--data``: LibriSpeech clips, looped; else
noise with a changing envelope) and ``decode_streams`` serves every ready stream in one cohort:
the ``stateful`` runtime's ``forward_step``, then the transducer head's batched greedy search
(predictor states stacked). The step latency is the wall time of one ``decode_streams`` call
(the greedy search reads its argmax on the host, and the device is synchronized after it).

Each ``--blank-bias`` is one run (the random joint emits almost nothing at 2 and the most a frame
may at 0, which bound the greedy loop's work; ``tokens_per_frame`` says which).

Writes OUT.json: per blank bias and N, p50 / p99 / mean step ms, steps, the chunk's audio
seconds, the real-time factor (mean step / chunk audio) and whether the p99 step fits in one
chunk of audio (a stream keeps up live), plus the device, dtype, config and lookahead.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SR = 16000
VOCAB = 1025  # 1024 tokens + blank


def model_config(small: bool, lookahead: int):
    from oasr.models.nemotron_streaming.config import NemotronStreamingConfig

    if small:
        return NemotronStreamingConfig(
            num_mel_bins=80, d_model=64, layers=2, heads=4, ff_dim=128, conv_kernel=9,
            subsampling_channels=16, vocab_size=VOCAB, blank_id=VOCAB - 1, pred_hidden=64,
            pred_layers=1, left_context=70, lookahead=lookahead)
    return NemotronStreamingConfig(
        num_mel_bins=80, d_model=1024, layers=24, heads=8, ff_dim=4096, conv_kernel=9,
        subsampling_channels=256, vocab_size=VOCAB, blank_id=VOCAB - 1, pred_hidden=640,
        pred_layers=2, left_context=70, lookahead=lookahead)


def write_random_bundle(dst: Path, small: bool, lookahead: int, blank_bias: float) -> Path:
    from tokenizers import Tokenizer, decoders, models

    from oasr.models.bundle import BundleRecord, write_bundle
    from oasr.models.nemotron_streaming.converter import HfNemotronStreamingConverter
    from oasr.models.nemotron_streaming.model import NemotronStreamingRnnt

    src = dst.parent / "src"
    src.mkdir(parents=True, exist_ok=True)
    units = {f"w{i}": i for i in range(VOCAB - 1)}
    units["<blank>"] = VOCAB - 1
    tok = Tokenizer(models.WordLevel(units, unk_token="<blank>"))
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(src / "tokenizer.json"))
    torch.manual_seed(0)
    cfg = model_config(small, lookahead)
    model = NemotronStreamingRnnt(cfg).eval()
    with torch.no_grad():
        model.joint.out.bias[VOCAB - 1] += blank_bias
    conv = HfNemotronStreamingConverter()
    record = BundleRecord(
        architecture="nemotron_streaming", model_config=cfg,
        model_config_class=conv.config_class, feature_config=conv.build_feature_config(cfg),
        tokenizer_spec=conv.build_tokenizer_spec(src),
        decoding_defaults={"max_sym_per_frame": cfg.max_symbols_per_step},
        source="random weights (benchmark)", source_format="native")
    write_bundle(dst, record, {k: v.contiguous() for k, v in model.state_dict().items()}, src)
    return dst


def audio_source(data: Path | None, seconds: float) -> list[np.ndarray]:
    n = int(seconds * SR)
    if data is not None:
        import soundfile as sf

        files = sorted(data.rglob("*.flac"))[:16]
        if not files:
            raise SystemExit(f"no .flac under {data}")
        out = []
        for f in files:
            a, sr = sf.read(f, dtype="float32")
            if sr != SR:
                raise SystemExit(f"{f}: {sr} Hz, expected {SR}")
            out.append(np.tile(a, n // len(a) + 1)[:n])
        return out
    rng = np.random.default_rng(0)
    env = np.repeat(10 ** rng.uniform(-3, -0.5, size=n // 800 + 1), 800)[:n]
    return [(env * rng.standard_normal(n)).astype(np.float32)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(engine, audios: list[np.ndarray], n: int, rounds: int, warmup: int,
        device: str) -> dict:
    from oasr.streaming import StreamingRecognizer, StreamOptions
    from oasr.vad.endpointer import EndpointConfig

    opts = StreamOptions(endpoint=EndpointConfig(enabled=False), max_streams=n)
    rec = StreamingRecognizer(engine, opts)
    pol = rec.policy
    hop = pol.hop
    chunk_samples = pol.stride * hop
    streams = [rec.create_stream() for _ in range(n)]
    pos = [0] * n
    lat, cohorts = [], []
    for r in range(rounds + warmup):
        for i, s in enumerate(streams):
            a = audios[i % len(audios)]
            take = chunk_samples if r else pol.geometry.first_window * hop + 256
            s.accept_waveform(SR, a[pos[i]:pos[i] + take])
            pos[i] += take
        while any(rec.is_ready(s) for s in streams):
            ready = sum(1 for s in streams if rec.is_ready(s))
            sync(device)
            t0 = time.perf_counter()
            rec.decode_streams(streams)
            sync(device)
            if r >= warmup:
                lat.append(time.perf_counter() - t0)
                cohorts.append(ready)
    tokens = [len(s.state.search.best().tokens) for s in streams]
    frames = [s.state.frames_out for s in streams]
    for s in streams:
        rec.close(s)
    chunk_s = chunk_samples / SR
    x = np.asarray(lat) * 1000.0
    return {"streams": n, "steps": int(len(x)), "mean_cohort": float(np.mean(cohorts)),
            "p50_ms": float(np.percentile(x, 50)), "p99_ms": float(np.percentile(x, 99)),
            "mean_ms": float(x.mean()), "chunk_audio_s": chunk_s,
            "rtf": float(x.mean() / 1000.0 / chunk_s),
            "keeps_up": bool(np.percentile(x, 99) / 1000.0 < chunk_s),
            # the random model's emissions per encoder frame (the greedy loop's work)
            "tokens_per_frame": float(sum(tokens) / max(sum(frames), 1))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--streams", default="1,8,32,64,128,256")
    ap.add_argument("--lookahead", type=int, default=13, help="13 / 6 / 1 / 0")
    ap.add_argument("--rounds", type=int, default=20, help="timed chunks per stream")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--blank-bias", default="2.0,0.0",
                    help="added to the joint's blank logit, one run each: the random model "
                         "emits ~no tokens at 2, the max per frame at 0 (reported per row)")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--small", action="store_true", help="a tiny model (CPU smoke run)")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda but CUDA is not available (use --device cpu --small)")
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine

    counts = [int(x) for x in args.streams.split(",")]
    dtype = "float32" if args.device == "cpu" else args.dtype
    chunk_s = 8 * (args.lookahead + 1) * 0.01
    audios = audio_source(args.data, (args.rounds + args.warmup + 2) * chunk_s + 1.0)
    rows = []
    for bias in (float(b) for b in args.blank_bias.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            bundle = write_random_bundle(Path(tmp) / "bundle", args.small, args.lookahead, bias)
            engine = ASREngine(EngineConfig(model=str(bundle), device=args.device,
                                            dtype=dtype))
            for n in counts:
                row = {"blank_bias": bias,
                       **run(engine, audios, n, args.rounds, args.warmup, args.device)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            del engine
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    cfg = model_config(args.small, args.lookahead)
    result = {
        "benchmark": "gpu_nemotron_stream",
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else
        platform.processor() or "cpu",
        "dtype": dtype, "torch": torch.__version__, "lookahead": args.lookahead,
        "chunk_audio_s": chunk_s, "small": args.small, "data": str(args.data or "noise"),
        "config": {"d_model": cfg.d_model, "layers": cfg.layers, "heads": cfg.heads,
                   "ff_dim": cfg.ff_dim, "num_mel_bins": cfg.num_mel_bins,
                   "left_context": cfg.left_context, "pred_hidden": cfg.pred_hidden},
        "rows": rows,
        "largest_streams_keeping_up": {
            str(b): max((r["streams"] for r in rows if r["keeps_up"] and r["blank_bias"] == b),
                        default=None) for b in sorted({r["blank_bias"] for r in rows})},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
