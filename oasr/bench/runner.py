"""Measuring a system on a manifest: RTFx, latency percentiles, tokens/s, peak memory, WER.

Audio is decoded once, before any timing. A run feeds the clips (repeated, as whole passes,
until at least ``repeat_minutes`` of audio; one pass by default) to a system at one batch size
after one untimed warm-up pass over the clips at that batch size (so our decoder-step CUDA
graphs for the batch's shapes are captured before timing, and the peer's kernels are warm),
and records:

* ``rtfx``: audio seconds / wall seconds of the run;
* latency percentiles (ms): ours, a request's finish time minus the time the engine pulled it
  from the request stream (the engine admits lazily, so queueing inside the engine counts, a
  request not yet pulled does not); at batch 1 the requests go one at a time (the next is
  handed over when the last finished), so the figure is a request's own service time; a peer,
  its batch's wall time for every request in it;
* ``tokens_per_s``: generated tokens / wall seconds;
* peak memory: ``torch.cuda.max_memory_allocated`` (reset per run) on CUDA, else the process's
  peak RSS: Linux's ``VmHWM``, reset at the run's start through ``/proc/self/clear_refs``
  (``cpu_peak_rss_run``; the resident set at the start counts, so a run's figure is at least
  what the process already held), elsewhere ``resource.getrusage`` (never reset:
  ``cpu_peak_rss_process``); ``memory_kind`` says which. Peers run in a process of their own
  (``oasr.bench.isolated``);
* ``wer``: of the first pass, against the manifest's text column (Whisper's English
  normalizer); None when the manifest has no references.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from oasr.engine.config import DEFAULT_MAX_NEW_TOKENS

__all__ = ["BenchClip", "BenchResult", "bench_ours", "bench_peer", "percentile", "read_clips",
           "repeat_clips"]

MEMORY_CUDA = "cuda_max_memory_allocated"
MEMORY_RSS = "cpu_peak_rss_process"
MEMORY_RSS_RUN = "cpu_peak_rss_run"  # VmHWM reset at the run's start (Linux clear_refs)


@dataclass
class BenchClip:
    """One decoded manifest row: (N,) float32 audio at the model's rate and its reference."""

    id: str
    audio: np.ndarray
    seconds: float
    text: str | None = None


@dataclass
class BenchResult:
    """One system at one batch size."""

    system: str
    batch_size: int
    requests: int
    passes: int
    audio_s: float
    wall_s: float
    rtfx: float
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p99_ms: float
    tokens: int
    tokens_per_s: float
    peak_memory_bytes: int
    memory_kind: str
    wer: float | None
    errors: int
    repeat: int = 0  # which repeat of this (system, batch) run, from 0
    # Which frontend computed a peer's input features (its own, or ours where it has none
    # here); None: ours, for our engine.
    features: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_clips(manifest: str, sample_rate: int) -> list[BenchClip]:
    """Every row of ``manifest`` decoded (raises ValueError on a row that cannot be read)."""
    from oasr.audio import load_audio
    from oasr.io import iter_manifest

    clips = []
    for row in iter_manifest([manifest]):
        if row.error is not None or row.audio is None:
            raise ValueError(f"{manifest}: row {row.id}: {row.error}")
        audio = load_audio(row.audio, sample_rate, offset=row.offset, duration=row.duration)
        clips.append(BenchClip(row.id, audio, len(audio) / sample_rate, row.text))
    return clips


def repeat_clips(clips: list[BenchClip], minutes: float | None) -> list[tuple[str, BenchClip]]:
    """(request id, clip) over whole passes of ``clips`` until >= ``minutes`` of audio.

    Pass 0 keeps the clip ids (WER is scored on it); later passes append ``#k``.
    """
    total = sum(c.seconds for c in clips)
    passes = 1 if not minutes or total <= 0 else max(1, math.ceil(minutes * 60 / total))
    return [(c.id if k == 0 else f"{c.id}#{k}", c) for k in range(passes) for c in clips]


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated ``q``-th percentile (0..100) of ``values``."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def _sync(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


_RSS_RESET = {"done": False}


def _reset_memory(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        return
    # Linux: writing 5 to clear_refs resets this process's peak RSS (VmHWM), so a CPU run's
    # figure is its own rather than the high-water mark of everything before it.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _RSS_RESET["done"] = True
    except OSError:
        _RSS_RESET["done"] = False


def _vm_hwm() -> int | None:
    """Linux's VmHWM (peak RSS of this process image, bytes): unlike ru_maxrss it is not
    inherited from the parent across fork/exec, and clear_refs resets it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _peak_memory(device: str) -> tuple[int, str]:
    import torch

    if str(device).startswith("cuda"):
        return int(torch.cuda.max_memory_allocated()), MEMORY_CUDA
    hwm = _vm_hwm()
    if hwm is not None:
        return hwm, MEMORY_RSS_RUN if _RSS_RESET["done"] else MEMORY_RSS
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(rss if sys.platform == "darwin" else rss * 1024), MEMORY_RSS


def _wer(clips: list[BenchClip], texts: dict[str, str]) -> float | None:
    from oasr.metrics.wer import EmptyReferenceError, score

    refs = {c.id: c.text for c in clips if c.text is not None}
    if not refs:
        return None
    try:
        return score(refs, {i: texts.get(i, "") for i in refs}, normalizer="whisper").wer
    except EmptyReferenceError:
        return None


def _result(system: str, batch: int, clips: list[BenchClip], work: list[tuple[str, BenchClip]],
            wall: float, latencies: list[float], tokens: int, texts: dict[str, str],
            device: str, errors: int) -> BenchResult:
    audio_s = sum(c.seconds for _, c in work)
    wall = max(wall, 1e-9)
    memory, kind = _peak_memory(device)
    return BenchResult(
        system=system, batch_size=batch, requests=len(work), passes=len(work) // len(clips),
        audio_s=audio_s, wall_s=wall, rtfx=audio_s / wall,
        latency_p50_ms=percentile(latencies, 50) * 1000,
        latency_p90_ms=percentile(latencies, 90) * 1000,
        latency_p99_ms=percentile(latencies, 99) * 1000,
        tokens=tokens, tokens_per_s=tokens / wall, peak_memory_bytes=memory, memory_kind=kind,
        wer=_wer(clips, texts), errors=errors,
    )


def bench_ours(lm: Any, model: str, clips: list[BenchClip], batch: int, device: str,
               dtype: str, repeat_minutes: float | None = None,
               max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
               quantization: str | None = None) -> BenchResult:
    """Our engine (``ASREngine``) over ``clips`` at ``max_batch_size=batch``.

    ``lm``: the loaded model, shared by every run (the engine moves it to ``device``/``dtype``
    and applies ``quantization`` to it in place: every run of one ``lm`` must ask for the
    same one). The result's system is ``ours`` or ``ours-<method>``.
    """
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request

    config = EngineConfig(model=model, device=device, dtype=dtype, max_batch_size=batch,
                          max_decode_slots=max(256, batch), max_new_tokens=max_new_tokens,
                          quantization=quantization)
    engine = ASREngine(config, loaded=lm)
    system = "ours" if engine.quantization is None else f"ours-{engine.quantization.spec.method}"
    resolved = config.resolve_device()
    list(engine.run(Request(f"warm-up-{i}", c.audio) for i, c in enumerate(clips)))

    work = repeat_clips(clips, repeat_minutes)
    handed: dict[str, float] = {}

    def requests() -> Iterator[Request]:
        for rid, clip in work:
            handed[rid] = time.perf_counter()
            yield Request(rid, clip.audio)

    def stream() -> Iterator[Any]:
        if batch > 1:
            yield from engine.run(requests())
            return
        for request in requests():  # closed loop: one request in the engine at a time
            yield from engine.run([request])

    _reset_memory(resolved)
    _sync(resolved)
    latencies: list[float] = []
    texts: dict[str, str] = {}
    tokens = errors = 0
    t0 = time.perf_counter()
    for out in stream():
        # Outputs leave the engine once their tokens are on the host: no sync needed here.
        if out.error is not None:  # refused at admission: no work to time
            errors += 1
            continue
        latencies.append(time.perf_counter() - handed[out.request_id])
        texts[out.request_id] = out.text
        tokens += len(out.token_ids)
    _sync(resolved)
    wall = time.perf_counter() - t0
    return _result(system, batch, clips, work, wall, latencies, tokens, texts, resolved, errors)


def bench_peer(peer: Any, clips: list[BenchClip], batch: int, device: str,
               repeat_minutes: float | None = None) -> BenchResult:
    """A peer (``oasr.bench.peers``) over ``clips`` in batches of ``batch``, in manifest order."""
    for i in range(0, len(clips), batch):  # warm-up pass
        peer.transcribe_with_counts([c.audio for c in clips[i:i + batch]])
    work = repeat_clips(clips, repeat_minutes)
    _reset_memory(device)
    _sync(device)
    latencies: list[float] = []
    texts: dict[str, str] = {}
    tokens = 0
    t0 = time.perf_counter()
    for i in range(0, len(work), batch):
        chunk = work[i:i + batch]
        start = time.perf_counter()
        out, n = peer.transcribe_with_counts([c.audio for _, c in chunk])
        _sync(device)
        latencies += [time.perf_counter() - start] * len(chunk)
        tokens += n
        texts.update({rid: t for (rid, _), t in zip(chunk, out, strict=True)})
    wall = time.perf_counter() - t0
    r = _result(peer.name, batch, clips, work, wall, latencies, tokens, texts, device, 0)
    r.features = getattr(peer, "features", None)
    return r
