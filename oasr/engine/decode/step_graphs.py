"""CUDA graphs of a decode loop's masked steps, captured once per shape and replayed.

A device-resident greedy search (``transducer_graph``, ``tdt_graph``) keeps its whole mutable
state in static buffers and runs every row through the same kernels each step, masked, so a
block of steps is capturable. ``StepGraphs`` owns the captures: keyed by whatever fixes the
buffers' shapes, at most ``max_captures`` of them (a new shape past that evicts the least
recently used one), each warmed up once on a side stream so lazy initialisation (cuBLAS
handles, cached weight copies) happens outside the capture. A capture that fails is said once
and turns capture off for that search (its loop then runs eagerly: the same kernels, launched
one by one). Frame capacities are powers of two (``frame_capacity``): a buffer sized for more
frames serves a shorter batch, so a job's batches share a few captures.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import torch

__all__ = ["GraphedSearch", "StepGraphs", "copy_state", "cuda_capture", "frame_capacity",
           "state_tensors"]

logger = logging.getLogger("oasr.engine")

B = TypeVar("B")
MIN_FRAMES = 64


def frame_capacity(frames: int) -> int:
    """The frame capacity of the buffers serving a batch of ``frames``: a power of two, at
    least ``MIN_FRAMES``."""
    return max(MIN_FRAMES, 1 << max(frames - 1, 0).bit_length())


def cuda_capture(body: Callable[[Any], None], buffers: Any, device: torch.device) -> Any:
    """Warm ``body(buffers)`` up on a side stream, then capture it into a new CUDA graph."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        body(buffers)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body(buffers)
    return graph


def state_tensors(state: Any) -> list[torch.Tensor]:
    """A predictor state's tensors: a tensor, a tuple/list of them or a dataclass of them."""
    if isinstance(state, torch.Tensor):
        return [state]
    if dataclasses.is_dataclass(state):
        return [getattr(state, f.name) for f in dataclasses.fields(state)]
    if isinstance(state, (tuple, list)):
        return list(state)
    raise TypeError(f"a predictor state of type {type(state).__name__} cannot be kept in "
                    "static buffers (a tensor, a tuple of tensors or a dataclass of them)")


def copy_state(dst: Any, src: Any) -> None:
    """Copy ``src``'s tensors into ``dst``'s (same structure) in place."""
    for d, s in zip(state_tensors(dst), state_tensors(src), strict=True):
        d.copy_(s)


class StepGraphs(Generic[B]):
    """Captured graphs of ``body(buffers)``, one per key, each with its own buffers.

    ``capture(body, buffers, device) -> graph``: ``cuda_capture`` unless a test substitutes one.
    """

    def __init__(self, what: str, max_captures: int, enabled: bool = True,
                 capture: Callable[[Callable[[Any], None], Any, torch.device], Any] | None = None
                 ) -> None:
        if max_captures < 1:
            raise ValueError(f"max_captures must be >= 1, got {max_captures}")
        self.what = what
        self.max_captures = max_captures
        self.capture = capture or cuda_capture
        self.enabled = enabled
        self.captures = 0  # graphs captured so far (tests and benchmarks read it)
        self.evictions = 0
        self._captured: OrderedDict[Hashable, tuple[Any, B]] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], B], body: Callable[[B], None],
            device: torch.device) -> tuple[Any, B] | None:
        """The graph for ``key`` (captured now if new) and its buffers; ``None`` when capture
        is off or failed (the caller runs eagerly)."""
        if not self.enabled:
            return None
        hit = self._captured.get(key)
        if hit is not None:
            self._captured.move_to_end(key)
            return hit
        if len(self._captured) >= self.max_captures:
            self._captured.popitem(last=False)  # its graph and buffers go with it
            self.evictions += 1
        buffers = make()
        try:
            graph = self.capture(body, buffers, device)
        except RuntimeError as exc:
            logger.warning("%s: CUDA-graph capture failed (%s); the loop runs eager for this "
                           "model", self.what, exc)
            self.enabled = False
            return None
        self._captured[key] = (graph, buffers)
        self.captures += 1
        return graph, buffers


class GraphedSearch:
    """What a device-resident search built on ``StepGraphs`` shows of its captures."""

    _graphs: StepGraphs[Any]

    @property
    def graphs(self) -> bool:
        """Whether the loop replays graphs (false when asked not to, or a capture failed)."""
        return self._graphs.enabled

    @property
    def captures(self) -> int:
        return self._graphs.captures
