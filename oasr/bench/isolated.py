"""Run a peer of ``oasr bench`` in a process of its own, so its peak memory is its own.

On CPU the peak RSS of a process never resets: measured in ours, a peer's figure would be the
high-water mark of both systems. Each peer therefore runs in a fresh ``spawn`` process that
decodes the same clips (sent over a pipe), builds the peer, measures every batch size and
repeat, and sends back the :class:`~oasr.bench.runner.BenchResult` s. ``ours`` stays in the
parent, which never holds a peer.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from typing import Any

from oasr.bench.runner import BenchClip, BenchResult

__all__ = ["PeerJob", "run_peer_isolated"]


@dataclass
class PeerJob:
    peer: str
    model: str  # what --model named (the peer loads it itself)
    device: str
    dtype: str
    max_new_tokens: int
    sizes: list[int]
    repeats: int
    repeat_minutes: float | None
    clips: list[BenchClip]
    threads: int = 0  # CPU threads (torch's and the peer's own pool); 0: their defaults
    architecture: str = ""  # the model's (ours loaded it): picks the transformers peer's family


def _work(job: PeerJob) -> list[dict[str, Any]]:
    from oasr.bench.peers import build_peer, peer_needs_weights
    from oasr.bench.runner import bench_peer
    from oasr.engine.config import EngineConfig

    probe = EngineConfig(model=job.model, device=job.device, dtype=job.dtype)
    device = probe.resolve_device()
    if job.threads:
        import torch

        torch.set_num_threads(job.threads)
    lm = None
    if job.peer == "transformers":
        import transformers

        transformers.logging.set_verbosity_error()
    if peer_needs_weights(job.peer, job.architecture):
        from oasr.models.loader import load_pretrained

        lm = load_pretrained(job.model or None)
    peer = build_peer(job.peer, lm, device, probe.resolve_dtype(device), job.max_new_tokens,
                      source=job.model, threads=job.threads)
    out = []
    for b in job.sizes:
        for k in range(job.repeats):
            r = bench_peer(peer, job.clips, b, device, job.repeat_minutes)
            r.repeat = k
            out.append(r.to_dict())
    return out


def _child(job: PeerJob, conn: Any) -> None:
    try:
        conn.send(("ok", _work(job)))
    except BaseException as exc:  # reported to the parent, which fails with the message
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_peer_isolated(job: PeerJob) -> list[BenchResult]:
    """``job`` in a spawned process; RuntimeError with the child's message when it fails."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(job, child), daemon=True)
    proc.start()
    child.close()
    try:
        status, payload = parent.recv()
    except EOFError:
        proc.join()
        raise RuntimeError(f"peer {job.peer} exited with code {proc.exitcode} before "
                           "reporting") from None
    proc.join()
    if status != "ok":
        raise RuntimeError(f"peer {job.peer}: {payload}")
    return [BenchResult(**d) for d in payload]
