"""Where a batch's time goes on the GPU: torch.profiler over one warm pass of our engine.

    python benchmarks/gpu_profile.py --bundle DIR --audio audio70.npz --batch 64 --out prof.txt

``--bundle`` takes any source ``oasr transcribe -m`` takes (default: the packaged Whisper
tiny.en); ``--dtype`` the engine's dtype (fp16, bf16, fp32).

``--audio``: a folder of .flac files or the npz ``gpu_record.py`` writes. Writes the wall of a
warm pass; its phases (staging + features, encoder, search, the rest), each between device syncs
in a separate pass; the GPU's busy time; the pass with the one-shot pipelining and with the
explicit rel-pos attention each flipped; device time per encoder module kind; and the top
operators by self CUDA time and by CPU time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

SR = 16000


def read_audio(src: Path) -> list[tuple[str, np.ndarray]]:
    """(id, float32 samples) per utterance: every .flac under a folder, or the int16 ``.npz``
    ``gpu_record.py`` writes."""
    if src.is_dir():
        import soundfile as sf

        files = sorted(src.rglob("*.flac"))
        if not files:
            raise SystemExit(f"no .flac files under {src}")
        return [(f.stem, sf.read(str(f), dtype="float32")[0]) for f in files]
    data = np.load(src)
    rows, pos = [], 0
    for uid, n in zip(data["ids"].tolist(), data["lengths"].tolist()):
        rows.append((str(uid), data["samples"][pos:pos + n].astype(np.float32) / 32768.0))
        pos += n
    return rows


def phase_split(engine, one_pass) -> dict[str, float]:
    """Seconds per phase of one pass, each bracketed by device syncs: staging + features
    (``InputProcessor``), the encoder, the search, and the rest (admission, host output
    building, scheduling): the rest is where the GPU waits on the host."""
    spent = {"inputs": 0.0, "encoder": 0.0, "search": 0.0}

    def timed(name, fn):
        def run(*a, **k):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(*a, **k)
            torch.cuda.synchronize()
            spent[name] += time.perf_counter() - t0
            return out
        return run

    class TimedInputs:  # the InputProcessor, its call timed (admission still reads .check)
        def __init__(self, inner):
            self.inner, self.call = inner, timed("inputs", inner)

        def __call__(self, *a, **k):
            return self.call(*a, **k)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    saved = engine.inputs, engine.runner.forward, getattr(engine.strategy, "search", None)
    engine.inputs = TimedInputs(saved[0])
    engine.runner.forward = timed("encoder", saved[1])
    if saved[2] is not None:
        engine.strategy.search = timed("search", saved[2])
    try:
        wall = one_pass()
    finally:
        engine.inputs, engine.runner.forward = saved[0], saved[1]
        if saved[2] is not None:
            del engine.strategy.search  # the instance attribute shadowed the method
    spent["rest"] = wall - sum(spent.values())
    spent["wall"] = wall
    return spent


def annotate_modules(model) -> list:
    """Profiler ranges named ``module:<Class>`` around every module of the encoder that the
    model's own package defines (layers, attention, feed-forward, convolution modules,
    subsampling, stacks), not the shared ``oasr.layers`` ones, so the table sums device time per
    kind of module, inclusive: a stack's row contains its layers' rows."""
    from torch.autograd.profiler import record_function

    encoder = getattr(model, "encoder", model)
    targets = [m for m in encoder.modules()
               if m is not encoder and type(m).__module__.startswith("oasr.models.")]
    handles = []
    for mod in targets:
        label = f"module:{type(mod).__name__}"

        def pre(m, args, label=label):
            m._oasr_range = record_function(label)
            m._oasr_range.__enter__()

        def post(m, args, out):
            m._oasr_range.__exit__(None, None, None)

        handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    return handles


def module_table(prof) -> list[str]:
    """Device time per ``module:`` range, largest first."""
    rows = [(e.device_time_total / 1e3, e.count, e.key) for e in prof.key_averages()
            if e.key.startswith("module:")]
    return [f"{ms:10.2f} ms  {n:6d} calls  {key}" for ms, n, key in sorted(rows, reverse=True)]


def native_attention_pass(engine, one_pass) -> float | None:
    """A pass with FastConformer's rel-pos attention in its explicit form (None: no such
    attention in the model)."""
    from oasr.models.fastconformer.attention import RelPositionAttention

    if not any(isinstance(m, RelPositionAttention) for m in engine.model.modules()):
        return None
    fused = RelPositionAttention.forward
    RelPositionAttention.forward = RelPositionAttention.forward_native
    try:
        one_pass()  # the explicit form's own shapes
        return one_pass()
    finally:
        RelPositionAttention.forward = fused


def busy_s(prof) -> float:
    """Kernel time the profiler saw, in seconds (overlapping streams counted twice)."""
    from torch.autograd import DeviceType

    return sum(e.time_range.elapsed_us() for e in prof.events()
               if e.device_type == DeviceType.CUDA) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="whisper-tiny.en")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "fp32"))
    ap.add_argument("--audio", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=8, help="passes over the audio per pass")
    args = ap.parse_args()

    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.models.loader import load_pretrained

    rows = read_audio(args.audio) * args.repeat
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
    phases = phase_split(engine, one_pass)
    overlap = engine.config.overlap_output_building
    engine.config.overlap_output_building = not overlap
    wall_flipped = one_pass()
    engine.config.overlap_output_building = overlap
    native_s = native_attention_pass(engine, one_pass)
    wall = one_pass()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        one_pass()
    handles = annotate_modules(engine.model)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as by_module:
        one_pass()
    for h in handles:
        h.remove()
    audio_s = sum(len(a) for _, a in rows) / SR
    lines = [
        f"batch {args.batch}, {len(rows)} utterances, {audio_s:.0f} s of audio",
        f"wall {wall:.3f} s (RTFx {audio_s / wall:.0f})",
        "phases, each timed between device syncs in one more pass: "
        + ", ".join(f"{k} {v:.3f} s" for k, v in phases.items()),
        f"GPU busy (the profiled pass's kernel time) {busy_s(prof):.3f} s",
        f"overlap_output_building {overlap}: wall {wall:.3f} s; {not overlap}: "
        f"{wall_flipped:.3f} s",
        "rel-pos attention through forward_native (explicit scores) instead of SDPA: "
        f"{'n/a' if native_s is None else f'{native_s:.3f} s'}",
        "", "device time per encoder module kind (a separate profiled pass):",
        *module_table(by_module),
        "", "top by self CUDA time:",
        prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25),
        "", "top by CPU time:",
        prof.key_averages().table(sort_by="cpu_time_total", row_limit=25),
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines[:6]))  # the figures, before the tables


if __name__ == "__main__":
    main()
