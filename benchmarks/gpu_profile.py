"""Where a batch's time goes on the GPU: torch.profiler over one warm pass of our engine.

    python benchmarks/gpu_profile.py --bundle DIR --audio audio70.npz --batch 64 --out prof.txt

``--bundle`` takes any source ``oasr transcribe -m`` takes (default: the packaged Whisper
tiny.en); ``--dtype`` the engine's dtype (fp16, bf16, fp32).

Writes the top operators by self CUDA time and by CPU time, and the wall split between the
encoder forward (``ModelRunner.forward``) and everything else (decoder steps, admission,
output), measured with device syncs around the encoder in a separate, unprofiled pass.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

SR = 16000


def read_npz(path: Path) -> list[tuple[str, np.ndarray]]:
    """(id, float32 samples) per utterance of the int16 ``.npz`` ``gpu_record.py`` writes."""
    data = np.load(path)
    rows, pos = [], 0
    for uid, n in zip(data["ids"].tolist(), data["lengths"].tolist()):
        rows.append((str(uid), data["samples"][pos:pos + n].astype(np.float32) / 32768.0))
        pos += n
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="whisper-tiny.en")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "fp32"))
    ap.add_argument("--audio", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.models.loader import load_pretrained

    rows = read_npz(args.audio) * 4
    engine = ASREngine(EngineConfig(device="cuda", dtype=args.dtype, max_batch_size=args.batch,
                                    max_decode_slots=max(256, args.batch)),
                       loaded=load_pretrained(args.bundle))

    def one_pass() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        list(engine.run(Request(f"{u}#{i}", a) for i, (u, a) in enumerate(rows)))
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    one_pass()  # warm: step graphs captured
    encode = engine.runner.forward
    spent = [0.0]

    def timed_forward(*a, **k):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = encode(*a, **k)
        torch.cuda.synchronize()
        spent[0] += time.perf_counter() - t0
        return out

    engine.runner.forward = timed_forward
    wall_synced = one_pass()
    engine.runner.forward = encode
    wall = one_pass()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        one_pass()
    audio_s = sum(len(a) for _, a in rows) / SR
    lines = [
        f"batch {args.batch}, {len(rows)} utterances, {audio_s:.0f} s of audio",
        f"wall {wall:.3f} s (RTFx {audio_s / wall:.0f}); with syncs around the encoder "
        f"{wall_synced:.3f} s, of which encoder {spent[0]:.3f} s",
        "", "top by self CUDA time:",
        prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25),
        "", "top by CPU time:",
        prof.key_averages().table(sort_by="cpu_time_total", row_limit=25),
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines[:2]))


if __name__ == "__main__":
    main()
