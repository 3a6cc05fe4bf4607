"""Decoder-step CUDA graphs: one ``torch.cuda.CUDAGraph`` per step shape, replayed.

A decode step of a label-synchronous AR family is weight-read bound at small batch, so most of
its wall time is kernel launches; replaying a captured graph removes them. A step can be
captured when every address it reads is fixed: the KV must be paged (``state.capturable``),
and the step's varying inputs -- the tokens, the block tables, the lengths -- are copied into
static buffers before each replay.

Keys are ``(rows, *state.graph_key())``: the exact row count (a padded row would change the
GEMMs' M, and with it which kernel runs, so a padded replay would not be bit-identical to the
eager step on the same rows) and the state's bucketed block-table width
(``oasr.cache.paged.bucket_blocks``: the next power of two of the blocks a step reads; the
eager paged step reads the same bucketed width, so both compute the same thing). The number
of shapes is therefore bounded by the row counts a group passes through (it shrinks only at
compaction) times a handful of widths; ``max_captures`` is the backstop, past which a step
runs eager rather than growing graph memory.

A capture that fails is remembered and not retried (each attempt costs a warm-up forward and
then runs eager anyway); an out-of-memory during capture turns capture off for the engine,
logged once, since it is a fact about the process rather than about the shape.

Capture itself synchronises the device (``torch.cuda.graph`` does), once per key; a replay
does not: inputs are copied device to device and the outputs are cloned out of the graph's
memory (graphs share one memory pool, so the next replay may reuse it).

Replayed steps bypass ``oasr.layers`` routing, so the kernel-gap counters count a captured
shape once, at capture.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger("oasr.engine")

DEFAULT_MAX_CAPTURES = 64

StepOutputs = tuple[torch.Tensor, dict[str, torch.Tensor]]
# capture(run) -> (graph, logits, outputs): ``run`` computes a step from the static inputs;
# ``graph.replay()`` recomputes it into the same ``logits`` / ``outputs`` tensors.
CaptureFn = Callable[[Callable[[], StepOutputs]], tuple[Any, torch.Tensor,
                                                         dict[str, torch.Tensor]]]


@dataclass
class _Graph:
    graph: Any
    tokens: torch.Tensor  # static input (B,)
    inputs: dict[str, torch.Tensor]  # static state inputs
    logits: torch.Tensor  # static output (B, V)
    outputs: dict[str, torch.Tensor]  # static state outputs


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


class CudaCapture:
    """The CUDA capture: a warm-up step on a side stream, then the capture, into one memory
    pool shared by every graph of the engine."""

    def __init__(self) -> None:
        self._pool: Any = None

    def __call__(self, run: Callable[[], StepOutputs]
                 ) -> tuple[Any, torch.Tensor, dict[str, torch.Tensor]]:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()  # lazy initialisation (cuBLAS handles, workspaces) outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            logits, outputs = run()
        return graph, logits, outputs


class DecoderStepGraphs:
    """Replays ``decoder.step(tokens, state)`` from CUDA graphs keyed by step shape.

    Args:
        max_captures: graphs kept at most; a new shape past it runs eager.
        capture: the capture backend (``CudaCapture()`` by default; tests substitute one).
    """

    def __init__(self, max_captures: int = DEFAULT_MAX_CAPTURES,
                 capture: CaptureFn | None = None) -> None:
        if max_captures < 0:
            raise ValueError(f"max_captures must be >= 0, got {max_captures}")
        self.max_captures = max_captures
        self.enabled = True
        self.graphs: dict[tuple, _Graph] = {}
        self.failed: set[tuple] = set()
        self.stats: Counter[str] = Counter()
        self._capture = capture if capture is not None else CudaCapture()

    @staticmethod
    def key(tokens: torch.Tensor, state: Any) -> tuple:
        return (tokens.shape[0], *state.graph_key())

    def step(self, decoder: Any, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        """tokens (B,) -> logits (B, V), replayed when the shape is captured (or capturable),
        else eager; ``state`` (which declares ``capturable``) advances exactly as the eager
        step advances it."""
        if not (self.enabled and state.capturable):
            self.stats["eager"] += 1
            return decoder.step(tokens, state)
        key = self.key(tokens, state)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self._try_capture(key, decoder, tokens, state)
            if entry is None:
                self.stats["eager"] += 1
                return decoder.step(tokens, state)
        entry.tokens.copy_(tokens)
        for name, t in state.graph_inputs().items():
            entry.inputs[name].copy_(t)
        entry.graph.replay()
        self.stats["replays"] += 1
        state.graph_commit({k: t.clone() for k, t in entry.outputs.items()})
        return entry.logits.clone()

    def _try_capture(self, key: tuple, decoder: Any, tokens: torch.Tensor,
                     state: Any) -> _Graph | None:
        if key in self.failed:
            return None
        if len(self.graphs) >= self.max_captures:
            self.stats["over_budget"] += 1
            return None
        # Static inputs start zeroed: the block tables then name only the null block, so the
        # warm-up step writes nothing a live row reads.
        static_tokens = torch.zeros_like(tokens)
        inputs = {k: torch.zeros_like(t) for k, t in state.graph_inputs().items()}

        def run() -> StepOutputs:
            view = state.graph_view(inputs)
            logits = decoder.step(static_tokens, view)
            return logits, view.graph_outputs()

        try:
            graph, logits, outputs = self._capture(run)
        except Exception as exc:  # noqa: BLE001 - any failure means: run this shape eager
            if is_oom(exc):
                self.enabled = False
                self.stats["oom"] += 1
                logger.warning("decoder step graphs: out of memory while capturing %s; step "
                               "graphs are off for this engine", key)
            else:
                self.failed.add(key)
                self.stats["failed"] += 1
                logger.warning("decoder step graphs: capturing %s failed (%s: %s); that shape "
                               "runs eager", key, type(exc).__name__, exc)
            return None
        self.stats["captures"] += 1
        entry = _Graph(graph, static_tokens, inputs, logits, outputs)
        self.graphs[key] = entry
        return entry
