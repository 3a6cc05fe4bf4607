"""A CPU stand-in for CUDA-graph capture with the same contract as ``CudaCapture``.

``capture(run)`` runs the step once (as the real warm-up does) and returns a graph whose
``replay()`` recomputes the step from the same static inputs into the *same* output tensors,
which is what a CUDA graph does. So the copy-in / replay / copy-out / commit plumbing of
``DecoderStepGraphs`` runs on a CPU, and a missed input copy or a stale output shows up as a
wrong token. ``fail`` makes every capture raise it; ``calls`` counts capture attempts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class FakeGraph:
    def __init__(self, run: Callable[[], Any], logits: torch.Tensor,
                 outputs: dict[str, torch.Tensor]) -> None:
        self.run = run
        self.logits = logits
        self.outputs = outputs
        self.replays = 0

    def replay(self) -> None:
        logits, outputs = self.run()
        self.logits.copy_(logits)
        for k, t in outputs.items():
            self.outputs[k].copy_(t)
        self.replays += 1


class FakeCapture:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.calls = 0

    def __call__(self, run: Callable[[], Any]) -> tuple[FakeGraph, torch.Tensor,
                                                         dict[str, torch.Tensor]]:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        logits, outputs = run()
        return FakeGraph(run, logits, outputs), logits, outputs
