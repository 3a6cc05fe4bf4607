"""Parakeet TDT on a GPU: our engine against transformers' ``ParakeetForTDT.generate``, same
random weights, same audio, one process.

The model has parakeet-tdt-0.6b-v2's shape (FastConformer 24 x 1024, 8 heads, 4096 FFN, 128
mels, 8x subsampling; LSTM predictor 2 x 640; 1024 tokens + blank; durations 0..4) with random
weights (none are available here): transformers' own initialization, saved with
``save_pretrained`` and converted by our converter, so both systems run the same tensors. The
joint's blank bias (``--blank-bias``) sets how often the random model emits; the emitted tokens
per encoder frame are reported for both, and the share of utterances whose token ids agree.

Each system transcribes the utterances of ``--data`` (repeated to at least ``--minutes`` of
audio) at each batch size after one untimed pass; ours repeats the timed pass until
``--min-wall`` seconds have run (short walls are noise on an H100). RTFx = audio seconds / wall
seconds, the frontend included for both (transformers' feature extractor on the same device).
``--profile`` adds, per arm, the top CUDA kernels of one pass at the largest batch (torch
profiler), written beside OUT as ``OUT.profile.txt``.

    python benchmarks/gpu_parakeet.py OUT.json --data DIR [--batches 64,128]
    python benchmarks/gpu_parakeet.py OUT.json --data DIR --device cpu --small   # smoke

``--data``: a folder of audio files (or with an ``audio/`` subfolder: LibriSpeech
test-other-70's layout), or an ``.npz`` with ``ids``, ``lengths`` and int16 ``samples``.
Where transformers has no ``ParakeetForTDT`` the weights are our model's own initialization
and the peer is skipped with the reason recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

SR = 16000
FULL = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=8,
            intermediate_size=4096, num_mel_bins=128, subsampling_conv_channels=256,
            conv_kernel_size=9, subsampling_factor=8)
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             num_mel_bins=128, subsampling_conv_channels=16, conv_kernel_size=9,
             subsampling_factor=8)
VOCAB = 1025  # 1024 tokens + blank (last)


def load_rows(data: Path, minutes: float) -> list[tuple[str, np.ndarray]]:
    if data.suffix == ".npz":
        z = np.load(data)
        rows, pos = [], 0
        for uid, n in zip(z["ids"].tolist(), z["lengths"].tolist(), strict=True):
            rows.append((str(uid), z["samples"][pos:pos + n].astype(np.float32) / 32768.0))
            pos += n
    else:
        from oasr.audio.decode import load_audio

        folder = data / "audio" if (data / "audio").is_dir() else data
        files = sorted(p for p in folder.iterdir() if p.suffix in (".flac", ".wav"))
        rows = [(p.stem, load_audio(str(p), SR)) for p in files]
    if not rows:
        raise SystemExit(f"no audio in {data}")
    out, k = list(rows), 1
    while sum(len(a) for _, a in out) < minutes * 60 * SR:
        out += [(f"{uid}#{k}", a) for uid, a in rows]
        k += 1
    return out


def write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models

    units = {f"t{i}": i for i in range(VOCAB - 1)}
    units["<blank>"] = VOCAB - 1
    tok = Tokenizer(models.WordLevel(units, unk_token="<blank>"))
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(folder / "tokenizer.json"))


def build_checkpoint(folder: Path, enc: dict[str, Any], blank_bias: float) -> tuple[Any, str]:
    """A random checkpoint at ``folder``: (transformers model or None, the reason it is None)."""
    import transformers as tf

    if not hasattr(tf, "ParakeetForTDT"):
        return None, (f"transformers {tf.__version__} has no ParakeetForTDT (added in 5.23); "
                      "peer skipped, weights are our model's own initialization")
    torch.manual_seed(0)
    cfg = tf.ParakeetTDTConfig(vocab_size=VOCAB, blank_token_id=VOCAB - 1,
                               pad_token_id=VOCAB - 1, decoder_hidden_size=640,
                               num_decoder_layers=2, durations=[0, 1, 2, 3, 4],
                               encoder_config=dict(enc, dropout=0.0, attention_dropout=0.0,
                                                   activation_dropout=0.0, layerdrop=0.0))
    model = tf.ParakeetForTDT(cfg).eval()
    with torch.no_grad():
        model.joint.head.bias[VOCAB - 1] += blank_bias
    model.save_pretrained(folder)
    try:  # its constructor needs librosa; without it the converter uses the same defaults
        tf.ParakeetFeatureExtractor(feature_size=enc["num_mel_bins"]).save_pretrained(folder)
    except ImportError:
        pass
    write_tokenizer(folder)
    return model, ""


def loaded_model(folder: Path, hf: Any, enc: dict[str, Any], blank_bias: float) -> Any:
    from oasr.models.loader import LoadedModel, load_pretrained

    if hf is not None:
        return load_pretrained(str(folder))
    from oasr.features.spec import FeatureConfig
    from oasr.models.fastconformer.config import FastConformerConfig
    from oasr.models.fastconformer.converters import parakeet_logmel_features
    from oasr.models.fastconformer.transducer import FastConformerTdt
    from oasr.tokenizers import build_tokenizer
    from oasr.tokenizers.base import TokenizerSpec

    torch.manual_seed(0)
    cfg = FastConformerConfig(
        num_mel_bins=enc["num_mel_bins"], d_model=enc["hidden_size"],
        layers=enc["num_hidden_layers"], heads=enc["num_attention_heads"],
        ff_dim=enc["intermediate_size"], subsampling_channels=enc["subsampling_conv_channels"],
        head="tdt", vocab_size=VOCAB, blank_id=VOCAB - 1, pred_hidden=640, pred_layers=2)
    model = FastConformerTdt(cfg).eval()
    with torch.no_grad():
        model.joint.out.bias[VOCAB - 1] += blank_bias
    write_tokenizer(folder)
    tok = build_tokenizer(TokenizerSpec("huggingface", {"tokenizer_json": "tokenizer.json"}),
                          folder)
    feats: FeatureConfig = parakeet_logmel_features(cfg.num_mel_bins)
    return LoadedModel(model=model, tokenizer=tok, feature_config=feats, name="random",
                       architecture="parakeet_tdt")


def _peer_features() -> str:
    import transformers as tf

    try:
        tf.ParakeetFeatureExtractor(feature_size=80)
        return "transformers' ParakeetFeatureExtractor"
    except (ImportError, AttributeError) as exc:
        return f"ours (parakeet_logmel), transformers' extractor unavailable: {exc}".strip()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_ours(lm: Any, rows: list[tuple[str, np.ndarray]], batch: int, device: str,
             dtype: str, quantization: str | None = None, min_wall: float = 0.0,
             profile: list[str] | None = None) -> dict[str, Any]:
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request

    eng = ASREngine(EngineConfig(device=device, dtype=dtype, max_batch_size=batch,
                                 max_decode_slots=max(256, batch), quantization=quantization),
                    loaded=lm)
    list(eng.run(Request(f"warm{i}", a) for i, (_, a) in enumerate(rows[:2 * batch])))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    passes = 0
    while passes == 0 or time.perf_counter() - t0 < min_wall:
        ids: dict[str, list[int]] = {}
        for out in eng.run(Request(uid, a) for uid, a in rows):
            ids[out.request_id] = list(out.token_ids)
        sync(device)
        passes += 1
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    if profile is not None:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        cuda = device == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with torch_profile(activities=activities) as prof:
            list(eng.run(Request(uid, a) for uid, a in rows))
            sync(device)
        table = prof.key_averages().table(
            sort_by="cuda_time_total" if cuda else "cpu_time_total", row_limit=30)
        profile.append(f"== batch {batch}, quantization {quantization or 'none'}\n{table}")
    return {"wall_s": wall / passes, "passes": passes, "ids": ids, "peak_gib": peak}


def token_agreement(ours: dict[str, list[int]], ref: dict[str, list[int]]) -> float:
    """1 - (token edits from ``ref`` to ``ours``) / (the longer side's tokens), summed over
    every utterance: 1 when equal, 0 when nothing matches (an edit count never exceeds the
    longer sequence, so the figure stays in [0, 1] where edits / ``ref`` alone does not)."""
    from rapidfuzz.distance import Levenshtein  # jiwer's own edit distance

    edits = sum(Levenshtein.distance(b, ours[uid]) for uid, b in ref.items())
    longer = sum(max(len(b), len(ours[uid])) for uid, b in ref.items())
    return 1.0 - edits / max(1, longer)


def hf_tokens(out: Any, enc_lens: torch.Tensor, blank: int) -> list[list[int]]:
    """Per row, the labels of transformers' generate output up to the row's last frame (it
    steps every row until all are done and does not pad finished ones)."""
    seqs, durs = out.sequences.tolist(), out.durations.tolist()
    rows = []
    for b, n in enumerate(enc_lens.tolist()):
        frame, toks = 0, []
        for tok, dur in zip(seqs[b][1:], durs[b][1:]):
            if frame >= n:
                break
            if tok != blank:
                toks.append(tok)
            frame += dur
        rows.append(toks)
    return rows


def run_transformers(hf: Any, rows: list[tuple[str, np.ndarray]], batch: int, device: str,
                     dtype: torch.dtype, bins: int) -> dict[str, Any]:
    import transformers as tf

    model = hf.to(device=device, dtype=dtype)
    try:
        fe = tf.ParakeetFeatureExtractor(feature_size=bins)
    except ImportError:  # it needs librosa: give transformers our features (equal within
        fe = None        # 1.2e-6 to its extractor's, tests/models/fastconformer), on the device
        from oasr.features import build_extractor
        from oasr.models.fastconformer.converters import parakeet_logmel_features

        fcfg = parakeet_logmel_features(bins)
        spec = build_extractor(fcfg)

    def features(chunk: list[tuple[str, np.ndarray]]) -> tuple[torch.Tensor, torch.Tensor]:
        if fe is not None:
            x = fe([a for _, a in chunk], sampling_rate=SR, return_tensors="pt",
                   return_attention_mask=True, device=device)
            return x.input_features.to(device, dtype), x.attention_mask.to(device)
        n = max(len(a) for _, a in chunk)
        wav = torch.zeros(len(chunk), n)
        for i, (_, a) in enumerate(chunk):
            wav[i, :len(a)] = torch.from_numpy(a)
        lens = torch.tensor([len(a) for _, a in chunk])
        feats, flens = spec.fn(wav.to(device), lens.to(device), fcfg)
        mask = torch.arange(feats.shape[1], device=device)[None] < flens.to(device)[:, None]
        return feats.to(dtype), mask.long()

    def decode(chunk: list[tuple[str, np.ndarray]]) -> list[list[int]]:
        feats, mask = features(chunk)
        out = model.generate(feats, attention_mask=mask, decoder_start_token_id=VOCAB - 1)
        lens = model.encoder._get_subsampling_output_length(mask.sum(-1))
        return hf_tokens(out, lens, VOCAB - 1)

    with torch.inference_mode():
        decode(rows[:batch])
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        sync(device)
        t0 = time.perf_counter()
        ids: dict[str, list[int]] = {}
        for i in range(0, len(rows), batch):
            chunk = rows[i:i + batch]
            ids.update({uid: t for (uid, _), t in zip(chunk, decode(chunk), strict=True)})
        sync(device)
    return {"wall_s": time.perf_counter() - t0, "ids": ids,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--batches", default="64,128")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--blank-bias", type=float, default=0.0)
    ap.add_argument("--small", action="store_true", help="a tiny model (smoke runs)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--min-wall", type=float, default=10.0,
                    help="repeat our timed pass until this many seconds have run")
    ap.add_argument("--profile", action="store_true",
                    help="the top CUDA kernels of one pass per arm at the largest batch")
    ap.add_argument("--quantization", default="",
                    help="also run ours with this method (fp8: the encoder's GEMMs on "
                         "torch._scaled_mm), same batches, against the unquantized tokens")
    args = ap.parse_args()
    enc = SMALL if args.small else FULL
    rows = load_rows(args.data, args.minutes)
    audio_s = sum(len(a) for _, a in rows) / SR
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    tmp = Path(tempfile.mkdtemp(prefix="oasr-parakeet-"))
    os.environ.setdefault("OASR_CACHE_DIR", str(tmp / "cache"))
    hf, skip = build_checkpoint(tmp / "hf", enc, args.blank_bias)
    (tmp / "hf").mkdir(exist_ok=True)
    lm = loaded_model(tmp / "hf", hf, enc, args.blank_bias)
    if args.no_peer and hf is not None:
        hf, skip = None, "--no-peer"
    import transformers

    result: dict[str, Any] = {
        "model": "parakeet-tdt-0.6b-v2 shape" if not args.small else "small",
        "encoder": enc, "weights": "random (transformers init)" if skip == "" else "random (ours)",
        "blank_bias": args.blank_bias, "device": args.device, "dtype": args.dtype,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "utterances": len(rows), "audio_s": audio_s, "peer_skipped": skip or None, "runs": [],
        "peer_features": _peer_features(),
    }
    batches = [int(b) for b in args.batches.split(",")]
    frames = sum(len(a) // 160 // 8 for _, a in rows)
    ours_ids = {}
    profile: list[str] | None = [] if args.profile else None

    def profiled(batch: int) -> list[str] | None:
        return profile if batch == max(batches) else None

    for batch in batches:  # ours first, every batch: a failing peer cannot lose them
        ours = run_ours(lm, rows, batch, args.device, args.dtype, min_wall=args.min_wall,
                        profile=profiled(batch))
        ours_ids[batch] = ours["ids"]
        run: dict[str, Any] = {
            "batch": batch,
            "ours": {"wall_s": ours["wall_s"], "passes": ours["passes"],
                     "rtfx": audio_s / ours["wall_s"],
                     "peak_gib": ours["peak_gib"],
                     "tokens_per_frame": sum(map(len, ours["ids"].values())) / frames}}
        result["runs"].append(run)
        args.out.write_text(json.dumps(result, indent=2))
        print(json.dumps(run), flush=True)
    if args.quantization:  # before the peer: its failure can poison the CUDA context
        qlm = loaded_model(tmp / "hf", hf, enc, args.blank_bias)  # quantized in place
        for run in result["runs"]:
            batch = run["batch"]
            q = run_ours(qlm, rows, batch, args.device, args.dtype, args.quantization,
                         min_wall=args.min_wall, profile=profiled(batch))
            run[f"ours_{args.quantization}"] = {
                "wall_s": q["wall_s"], "passes": q["passes"], "rtfx": audio_s / q["wall_s"],
                "peak_gib": q["peak_gib"],
                "speedup_over_unquantized": run["ours"]["wall_s"] / q["wall_s"],
                "identical_utterances": sum(q["ids"][u] == ours_ids[batch][u] for u, _ in rows)
                / len(rows),
                "token_agreement": token_agreement(q["ids"], ours_ids[batch])}
            args.out.write_text(json.dumps(result, indent=2))
            print(json.dumps({"batch": batch, **run[f"ours_{args.quantization}"]}), flush=True)
    for run in result["runs"] if hf is not None else []:
        batch = run["batch"]
        try:
            peer = run_transformers(hf, rows, batch, args.device, torch_dtype[args.dtype],
                                    enc["num_mel_bins"])
        except Exception as exc:  # recorded, not hidden: the peer's failure is a result
            run["transformers_error"] = f"{type(exc).__name__}: {exc}"[:500]
            args.out.write_text(json.dumps(result, indent=2))
            break  # a CUDA device-side assert poisons the context for every later run
        same = sum(ours_ids[batch][u] == peer["ids"][u] for u, _ in rows) / len(rows)
        run["transformers"] = {
            "wall_s": peer["wall_s"], "rtfx": audio_s / peer["wall_s"],
            "peak_gib": peer["peak_gib"],
            "tokens_per_frame": sum(map(len, peer["ids"].values())) / frames}
        run["speedup"] = peer["wall_s"] / run["ours"]["wall_s"]
        run["identical_utterances"] = same
        args.out.write_text(json.dumps(result, indent=2))
        print(json.dumps(run), flush=True)
    args.out.write_text(json.dumps(result, indent=2))
    if profile:
        args.out.with_name(args.out.name + ".profile.txt").write_text("\n\n".join(profile))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
