"""Paraformer offline throughput: Paraformer-large's shape (random weights) on real audio.

Builds a random ``ParaformerModel`` of Paraformer-large's shape (560-dim LFR input, d_model 512,
50 SAN-M encoder layers, 16 decoder layers, 8404 tokens, CIF tail 0.45), writes it as a native
bundle (with a synthetic 8404-token ``tokens.json`` and an identity ``am.mvn``: no FunASR, no
download), and runs ``ASREngine.run`` over the clips in ``DIR/audio/*.flac`` repeated to at least
``--minutes`` of audio, at each ``--batch-sizes``, in fp32 and fp16. Each run first makes one
untimed pass. RTFx = audio seconds / wall seconds (features, encoder, CIF, decoder, argmax,
detokenisation). Random weights: the transcripts mean nothing, the CIF fires about as often as
a trained one does only by chance, so the decoder's K differs from a real model's.

    python benchmarks/gpu_paraformer.py OUT.json --data DIR            # the H200
    python benchmarks/gpu_paraformer.py OUT.json --data DIR --device cpu --small   # smoke
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

SR = 16000
LARGE = dict(input_dim=560, vocab_size=8404, d_model=512, encoder_layers=50, encoder_heads=4,
             encoder_linear_units=2048, encoder_kernel_size=11, decoder_layers=16,
             decoder_att_layers=16, decoder_heads=4, decoder_linear_units=2048,
             decoder_kernel_size=11, predictor_tail_threshold=0.45)
SMALL = dict(input_dim=560, vocab_size=64, d_model=32, encoder_layers=2, encoder_heads=2,
             encoder_linear_units=48, encoder_kernel_size=11, decoder_layers=2,
             decoder_att_layers=2, decoder_heads=2, decoder_linear_units=48,
             decoder_kernel_size=11, predictor_tail_threshold=0.45)


def write_random_bundle(dst: Path, shape: dict[str, Any], seed: int = 0) -> Path:
    from oasr.features.spec import FeatureConfig
    from oasr.models.bundle import BundleRecord, write_bundle
    from oasr.models.paraformer.config import ParaformerConfig
    from oasr.models.paraformer.model import ParaformerModel
    from oasr.tokenizers.base import TokenizerSpec

    torch.manual_seed(seed)
    cfg = ParaformerConfig(**shape)
    model = ParaformerModel(cfg).eval()
    src = dst.parent / "tokens_src"
    src.mkdir(parents=True, exist_ok=True)
    # CJK characters after the three specials, as a Chinese char vocabulary is laid out.
    tokens = ["<blank>", "<s>", "</s>"] + [chr(0x4E00 + i) for i in range(cfg.vocab_size - 3)]
    (src / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
    fc = FeatureConfig("fbank", sample_rate=SR, num_mel_bins=cfg.num_mel_bins,
                       frame_length_ms=25.0, frame_shift_ms=10.0,
                       params={"window_type": "hamming", "dither": 0.0, "audio_scale": 32768.0},
                       lfr_m=cfg.lfr_m, lfr_n=cfg.lfr_n)
    # An identity am.mvn would leave raw log-mels (~ +10) into the encoder; centre them.
    sd = model.state_dict()
    sd["cmvn_shift"] = torch.full_like(sd["cmvn_shift"], -10.0)
    sd["cmvn_scale"] = torch.full_like(sd["cmvn_scale"], 0.3)
    record = BundleRecord(
        architecture="paraformer", model_config=cfg,
        model_config_class="oasr.models.paraformer.config:ParaformerConfig", feature_config=fc,
        tokenizer_spec=TokenizerSpec(kind="funasr_char", files={"tokens": "tokens.json"}),
        decoding_defaults={}, source="random (benchmark)", source_format="native")
    write_bundle(dst, record, sd, src, overwrite=True)
    return dst


def load_clips(data: Path, limit: int | None) -> list[tuple[str, np.ndarray]]:
    files = sorted((data / "audio").glob("*.flac")) or sorted(data.glob("*.flac"))
    if not files:
        raise SystemExit(f"no .flac files under {data}/audio or {data}")
    out = []
    for f in files[:limit]:
        wav, sr = sf.read(f, dtype="float32")
        if sr != SR:
            raise SystemExit(f"{f}: {sr} Hz; the benchmark reads 16 kHz clips")
        out.append((f.stem, wav))
    return out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(lm: Any, rows: list[tuple[str, np.ndarray]], batch: int, dtype: str,
        device: str) -> dict[str, Any]:
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request

    eng = ASREngine(EngineConfig(device=device, dtype=dtype, max_batch_size=batch,
                                 max_decode_slots=max(256, batch)), loaded=lm)
    list(eng.run(Request(f"warm{i}", a) for i, (_, a) in enumerate(rows[:batch])))
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    tokens, errors = 0, 0
    for out in eng.run(Request(uid, a) for uid, a in rows):
        tokens += len(out.token_ids)
        errors += out.error is not None
    sync(device)
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return {"wall_s": wall, "tokens": tokens, "errors": errors, "peak_gib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, required=True,
                    help="a folder of 16 kHz .flac clips (DIR/audio/*.flac or DIR/*.flac)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--dtypes", default="fp32,fp16")
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--small", action="store_true",
                    help="a tiny shape, 4 clips, no repeats: a smoke test of the script")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu --small for the smoke mode")
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2 if args.small else 64)))

    from oasr.models.loader import load_pretrained

    shape = SMALL if args.small else LARGE
    base = load_clips(args.data, 4 if args.small else None)
    base_s = sum(len(a) for _, a in base) / SR
    reps = 1 if args.small else max(1, int(np.ceil(args.minutes * 60 / base_s)))
    many = [(f"{uid}#{r}", a) for r in range(reps) for uid, a in base]
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "shape": shape, "weights": "random",
        "clips": len(base), "repeats": reps, "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        bundle = write_random_bundle(Path(tmp) / "bundle", shape)
        lm = load_pretrained(str(bundle))
        for dtype in args.dtypes.split(","):
            if dtype == "fp16" and not args.device.startswith("cuda"):
                continue
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                rows = base if batch == 1 else many
                audio_s = sum(len(a) for _, a in rows) / SR
                r = run(lm, rows, batch, dtype, args.device)
                entry = {"dtype": dtype, "batch": batch, "audio_s": round(audio_s, 2),
                         "wall_s": round(r["wall_s"], 3),
                         "rtfx": round(audio_s / r["wall_s"], 1),
                         "tokens_per_s": round(r["tokens"] / r["wall_s"], 1),
                         "errors": r["errors"],
                         "peak_gib": None if r["peak_gib"] is None else round(r["peak_gib"], 3)}
                results["runs"].append(entry)
                print(json.dumps(entry), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=1))  # a time limit keeps these
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
