"""Zipformer (icefall's 70M shape, random weights) on real audio: encoder RTFx, transducer
greedy and modified beam 4 decode time per batch, ours against upstream's code.

One batch of ``--batch`` LibriSpeech clips (repeated when the folder has fewer) is featurised
once (Kaldi fbank, 80 bins, on the device). The same random weights run through icefall's
``AsrModel`` (PyPI ``zipformer==0.1.3``, imported with the test helper's stubs) and through
``ZipformerModel`` (converted by ``model_state_dict``). Timed (synchronised wall clock, median
of ``--reps`` after one warm-up): the encoder forward, greedy search (max_sym_per_frame 1)
and modified beam search (beam 4) on the encoder output. Hypothesis agreement with upstream
is reported per search (rows equal / rows). Random weights emit arbitrary labels, so decode
times are those of this model's emission rate, not a trained model's.

Usage: python benchmarks/gpu_zipformer.py OUT.json --data DIR [--batch 64] [--reps 5]
       python benchmarks/gpu_zipformer.py OUT.json --data DIR --device cpu --small  (smoke)
Upstream is skipped (reported as such) when the zipformer wheel is not installed: carry it
with ``pip download zipformer==0.1.3 --no-deps -d DIR`` and ``pip install --no-deps``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oasr.engine.decode.transducer_graph import DeviceGreedy  # noqa: E402
from oasr.engine.decode.transducer_search import greedy_search, modified_beam_search  # noqa: E402
from oasr.features import FeatureConfig  # noqa: E402
from oasr.features.kaldi import fbank_native  # noqa: E402
from oasr.models.zipformer.config import ZipformerConfig  # noqa: E402
from oasr.models.zipformer.converters import model_state_dict  # noqa: E402
from oasr.models.zipformer.model import ZipformerModel  # noqa: E402

SR = 16000
SMALL = dict(feature_dim=80, downsampling_factor=(1, 2), encoder_dim=(32, 48),
             num_encoder_layers=1, num_heads=2, query_head_dim=8, value_head_dim=4,
             feedforward_dim=64, cnn_module_kernel=7, pos_dim=16, vocab_size=50,
             decoder_dim=32, joiner_dim=32)


def load_batch(folder: Path, batch: int, limit_s: float | None) -> tuple[list[np.ndarray], float]:
    files = sorted((folder / "audio").glob("*.flac")) or sorted(folder.glob("*.flac"))
    if not files:
        raise SystemExit(f"no .flac files under {folder} (or {folder}/audio)")
    clips = []
    for k in range(batch):
        x, sr = sf.read(str(files[k % len(files)]), dtype="float32")
        if sr != SR:
            raise SystemExit(f"{files[k % len(files)]}: {sr} Hz, expected {SR}")
        clips.append(x[:int(limit_s * SR)] if limit_s else x)
    return clips, sum(len(c) for c in clips) / SR


def features(clips: list[np.ndarray], device: torch.device
             ) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(c) for c in clips)
    wav = torch.zeros(len(clips), n)
    for i, c in enumerate(clips):
        wav[i, :len(c)] = torch.from_numpy(c) * 32768.0
    lens = torch.tensor([len(c) for c in clips])
    cfg = FeatureConfig(feature_type="fbank", sample_rate=SR, num_mel_bins=80,
                        frame_shift_ms=10, frame_length_ms=25, params={"dither": 0.0})
    return fbank_native(wav.to(device), lens.to(device), cfg)


def timed(fn, device: torch.device, reps: int) -> tuple[float, object]:
    """Median seconds of ``reps`` calls after one warm-up, and the last result."""
    out = fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def upstream_model(cfg: ZipformerConfig):
    try:
        from tests.helpers.zipformer_oracle import asr_model, oracle
    except ImportError:
        return None, None
    up = oracle()
    if up is None:
        return None, None

    ref = asr_model(up, cfg, use_ctc=False)
    return up, ref.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--small", action="store_true", help="tiny model, 4 clips, 4 s: a smoke run")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = ZipformerConfig(**SMALL) if args.small else ZipformerConfig(
        vocab_size=500, decoder_dim=512, joiner_dim=512)
    batch = args.batch or (4 if args.small else 64)
    reps = args.reps or (1 if args.small else 5)
    clips, audio_s = load_batch(args.data, batch, 4.0 if args.small else None)
    feats, lens = features(clips, device)

    up, ref = upstream_model(cfg)
    ours = ZipformerModel(cfg)
    if ref is not None:
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        ours.load_state_dict(model_state_dict(ref.state_dict()), strict=True)
    ours = ours.to(device).eval()
    result: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "batch": batch, "audio_seconds": round(audio_s, 2),
        "params_M": round(sum(p.numel() for p in ours.parameters()) / 1e6, 2),
        "config": cfg.to_dict(), "reps": reps, "ours": {}, "upstream": None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(phase: str) -> None:  # each phase lands on disk: a time limit keeps the rest
        args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
        print(f"{phase} done", flush=True)

    ours_r: dict = {}
    result["ours"] = ours_r
    with torch.inference_mode():
        enc_s, (hidden, hidden_lens) = timed(lambda: ours.encode_offline(feats, lens),
                                             device, reps)
        ours_r.update(encoder_s=enc_s, encoder_rtfx=audio_s / enc_s)
        save("encoder")
        greedy_s, g = timed(lambda: greedy_search(ours.predictor, ours.joiner, hidden,
                                                  hidden_lens), device, reps)
        ours_r.update(greedy_s_per_batch=greedy_s,
                      labels_per_row_greedy=sum(len(h.tokens) for h in g) / batch)
        save("greedy")
        for name, graphs in (("device_eager", False), ("graphs", True)):
            dg = DeviceGreedy(ours.predictor, ours.joiner, graphs=graphs)
            d_s, dh = timed(lambda dg=dg: dg.search(hidden, hidden_lens), device, reps)
            ours_r[f"greedy_{name}_s_per_batch"] = d_s
            ours_r[f"greedy_{name}_rows_equal_loop"] = sum(
                a.tokens == b.tokens for a, b in zip(dh, g))
            ours_r[f"greedy_{name}_captures"] = dg.captures
        save("greedy device")
        beam_s, bm = timed(lambda: modified_beam_search(ours.predictor, ours.joiner, hidden,
                                                        hidden_lens, beam=4), device, 1)
        ours_r.update(beam4_s_per_batch=beam_s, beam4_over_greedy=beam_s / greedy_s)
        save("beam4")
    if ref is None:
        result["upstream"] = "not run: the zipformer wheel is not installed"
    else:
        ref = ref.to(device)
        with torch.inference_mode():
            uenc_s, (uenc, ulens) = timed(lambda: ref.forward_encoder(feats, lens), device,
                                          reps)
            ug_s, ug = timed(lambda: up.search.greedy_search(ref, uenc, ulens), device, reps)
            ub_s, ub = timed(lambda: up.search.modified_beam_search(ref, uenc, ulens, beam=4),
                             device, 1)
        err = max(float((hidden[b, :n] - uenc[b, :n]).abs().max())
                  for b, n in enumerate(ulens.tolist()))
        result["upstream"] = {
            "encoder_s": uenc_s, "encoder_rtfx": audio_s / uenc_s,
            "greedy_s_per_batch": ug_s, "beam4_s_per_batch": ub_s,
            "encoder_max_abs_diff": err,
            "greedy_rows_equal": sum(h.tokens == u for h, u in zip(g, ug)),
            "beam4_rows_equal": sum(h[0].tokens == u for h, u in zip(bm, ub)),
        }
    save("upstream")
    print(json.dumps({k: v for k, v in result.items() if k != "config"}, indent=2))


if __name__ == "__main__":
    main()
