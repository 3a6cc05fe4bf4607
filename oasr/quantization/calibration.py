"""Activation statistics for calibration: each layer's largest input per channel, on audio.

``collect_stats(model, paths, run)`` hooks the layers' inputs while ``run()`` drives the float
model; ``calibrate(loaded, manifest, rows)`` runs the engine over a manifest's first rows (real
speech: ``oasr convert --quantize ... --calibration MANIFEST``). SmoothQuant reads the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["ActivationStats", "calibrate", "collect_stats"]


@dataclass
class ActivationStats:
    """Per layer path: the largest |input| per input channel (K,) fp32 and the rows seen."""

    absmax: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    source: str = ""

    def update(self, path: str, x: torch.Tensor) -> None:
        x2 = x.detach().reshape(-1, x.shape[-1]).float()  # (M, K)
        if x2.shape[0] == 0:
            return
        amax = x2.abs().amax(dim=0).cpu()
        prev = self.absmax.get(path)
        self.absmax[path] = amax if prev is None else torch.maximum(prev, amax)
        self.rows[path] = self.rows.get(path, 0) + x2.shape[0]


def collect_stats(model: Any, paths: Iterable[str], run: Callable[[], Any],
                  source: str = "") -> ActivationStats:
    """``run()`` with a hook on each layer of ``paths`` recording its input's per-channel
    absmax; the hooks are removed however ``run`` ends."""
    modules = dict(model.named_modules())
    stats = ActivationStats(source=source)
    handles = []
    try:
        for path in paths:
            def hook(_module: Any, args: tuple[Any, ...], path: str = path) -> None:
                stats.update(path, args[0])

            handles.append(modules[path].register_forward_pre_hook(hook))
        run()
    finally:
        for h in handles:
            h.remove()
    return stats


def calibrate(loaded: Any, manifest: str, rows: int, device: str = "cpu",
              paths: Iterable[str] | None = None) -> ActivationStats:
    """Transcribe the first ``rows`` rows of ``manifest`` with the float model and return the
    input statistics of ``paths`` (default: every quantizable GEMM)."""
    from oasr.bench.runner import read_clips
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.quantization.selection import quantizable_layers

    rate = loaded.feature_config.sample_rate
    clips = read_clips(manifest, rate)[:rows]
    if not clips:
        raise ValueError(f"{manifest}: no rows to calibrate on")
    window = loaded.feature_config.fixed_window_seconds
    # A fixed-window model takes one window per request: its first window is as
    # representative of the activations as the whole row.
    audios = [c.audio if window is None else c.audio[: int(window * rate)] for c in clips]
    engine = ASREngine(EngineConfig(device=device, dtype="fp32"), loaded=loaded)
    wanted = list(paths) if paths is not None else [
        p for p, m in quantizable_layers(engine.model).items() if m.quant_kind == "gemm"]

    def run() -> None:
        for out in engine.run(Request(f"calib-{i}", a) for i, a in enumerate(audios)):
            if out.error is not None:
                raise ValueError(f"{manifest}: calibration request {out.request_id}: {out.error}")

    return collect_stats(engine.model, wanted, run,
                         source=f"{manifest} (first {len(clips)} rows)")
