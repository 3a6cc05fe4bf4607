"""The fused recurrence (``rnn_cuda``) against the layers' per-step torch loop, on the GPU.

Shapes: Silero VAD's LSTM (128 -> 128) over 9.5 minutes of 32 ms windows (17,800 steps) for
1 and 16 rows; a recurrent transducer predictor's LSTM (640, 1 layer) called one step at a time
for a batch of 64, as a greedy decode calls it. Also the whole Silero detector on the shared
long recording with the kernel and with ``OASR_LAYERS_BACKEND``-style torch routing.

    python benchmarks/gpu_rnn.py --out OUT.json [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _timing import cuda_median_ms

from oasr import envs
from oasr.layers.rnn import LSTM


def _lstm_case(hidden: int, rows: int, steps: int, reps: int) -> dict:
    mod = LSTM(hidden, hidden).cuda()
    x = torch.randn(rows, steps, hidden, device="cuda")
    with torch.inference_mode():
        kern = cuda_median_ms(lambda: mod(x), reps=reps, warmup=1)
        native = cuda_median_ms(lambda: mod.forward_native(x), reps=max(1, reps // 3), warmup=1)
        diff = (mod(x)[0] - mod.forward_native(x)[0]).abs().max().item()
    return {"hidden": hidden, "rows": rows, "steps": steps, "kernel_ms": round(kern, 3),
            "torch_loop_ms": round(native, 3), "speedup": round(native / kern, 1),
            "max_abs_diff": diff}


def _stepwise_case(hidden: int, rows: int, steps: int) -> dict:
    mod = LSTM(hidden, hidden).cuda()
    x = torch.randn(rows, 1, hidden, device="cuda")

    def run(native: bool):
        state = None
        for _ in range(steps):
            _, state = (mod.forward_native(x, state) if native else mod(x, state))

    with torch.inference_mode():
        kern = cuda_median_ms(lambda: run(False), reps=5, warmup=1)
        native = cuda_median_ms(lambda: run(True), reps=5, warmup=1)
    return {"hidden": hidden, "rows": rows, "steps": steps, "kernel_us_per_step":
            round(1000 * kern / steps, 1), "torch_us_per_step": round(1000 * native / steps, 1)}


def _silero_detector(data: Path) -> dict | None:
    import soundfile as sf

    from oasr.ops import set_backend
    from oasr.vad import build_detector

    path = data / "longform" / "librispeech-test-other-70.flac"
    if not path.is_file():
        return None
    audio, sr = sf.read(path, dtype="float32")
    det = build_detector("silero", mode="presegment", device="cuda")
    wav = torch.from_numpy(audio)[None].repeat(16, 1)
    lengths = torch.full((16,), wav.shape[1])
    out = {"audio_h": round(16 * len(audio) / sr / 3600, 3)}
    for backend in ("oasr", "torch"):
        set_backend(backend)
        det.detect(wav[:1], lengths[:1], sr)  # warm
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        probs = det.detect(wav, lengths, sr).probs
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        out[backend] = {"wall_s": round(wall, 3),
                        "audio_hours_per_s": round(out["audio_h"] / wall, 1)}
        out.setdefault("probs", []).append(probs)
    set_backend(None)
    a, b = out.pop("probs")
    out["max_abs_prob_diff"] = (a - b).abs().max().item()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=str(envs.shared_data() or "../shared/data"))
    args = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "silero_lstm": [_lstm_case(128, r, 17_800, 5) for r in (1, 16)],
           "predictor_stepwise": _stepwise_case(640, 64, 200),
           "silero_detector_longform_x16": _silero_detector(Path(args.data))}
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
