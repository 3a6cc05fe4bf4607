"""``wfst_cuda``: the WFST token-passing search on the GPU, a batch in one launch
(oasr/csrc/kernels/wfst/).

One CTA per utterance runs ``RowSearch`` (token_passing.cuh), the header whose serial instance
is ``oasr._C.wfst.device_search`` (the CPU statement the GPU is tested against). Its search is
Kaldi's FasterDecoder with the next frame's cutoff computed exactly rather than while walking the
tokens; where max_active and min_active do not bind that is Kaldi's result (docs/decoding.md).

Per row the kernel needs dense per-state arrays (24 bytes x graph states) and token lists; they
are allocated per call. A row whose tokens, traceback arena or path outgrow their buffers
reports it, and the batch is decoded again with those buffers doubled (the result does not
depend on the sizes). Blank skipping is decided on the host from each frame's blank log-prob and
argmax (``oasr.graphs.search.decoded_frames``, the CPU search's rule), so the kernel reads a
list of frames per row.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from oasr import ops
from oasr.graphs.search import STATUS, SearchOptions, WfstPath, decoded_frames, path_from_arcs
from oasr.kernels import jit
from oasr.kernels._ctypes import check, stream_handle
from oasr.ops.build import WFST_CUDA

__all__ = ["WFST_SEARCH_GAP", "decode", "serves", "workspace_bytes"]

WFST_SEARCH_GAP = ops.declare_gap(ops.KernelGap(
    id="wfst-search",
    what="WFST searches the GPU search does not serve: hot-word boosting (the on-the-fly "
         "composition with the boosting automaton), and batches whose per-state workspace "
         "(24 bytes x graph states x rows) exceeds a quarter of the device's free memory",
    fix="oasr/csrc/kernels/wfst/token_passing.cuh: carry the boosting node in the token key "
        "(a hash instead of dense per-state arrays serves both); the CPU search serves them",
))
_MAX_RETRIES = 4


class _Graph(ctypes.Structure):
    _fields_ = [("num_states", ctypes.c_int32), ("start", ctypes.c_int32)] + [
        (n, ctypes.c_void_p) for n in ("final_cost", "emit_offsets", "emit_ilabel",
                                       "emit_weight", "emit_next", "eps_offsets", "eps_weight",
                                       "eps_next")]


class _Search(ctypes.Structure):
    _fields_ = [("beam", ctypes.c_float), ("max_active", ctypes.c_int32),
                ("min_active", ctypes.c_int32), ("beam_delta", ctypes.c_float),
                ("acoustic_scale", ctypes.c_float), ("blank_penalty", ctypes.c_float),
                ("blank", ctypes.c_int32)]


class _Batch(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in (
        "log_probs", "frames", "num_frames", "key", "bp", "slot", "stamp", "ints", "costs",
        "fkeys", "arena", "path", "path_length", "path_cost", "status")] + [
        (n, ctypes.c_int32) for n in ("B", "T", "N", "V", "capacity", "arena_size",
                                      "path_capacity", "pad")]


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = jit.load(WFST_CUDA)
    sizes = [ctypes.c_int32() for _ in range(3)]
    lib.oasr_wfst_sizes(*(ctypes.byref(s) for s in sizes))
    mine = (ctypes.sizeof(_Graph), ctypes.sizeof(_Search), ctypes.sizeof(_Batch))
    if tuple(s.value for s in sizes) != mine:
        raise RuntimeError(f"libwfst_cuda's argument structs are {[s.value for s in sizes]} "
                           f"bytes, the binding's {list(mine)}: rebuild the library")
    return lib


@dataclass
class _DeviceGraph:
    tensors: tuple[torch.Tensor, ...]
    struct: _Graph


_DEVICE_GRAPHS: dict[tuple[int, str], tuple[Any, _DeviceGraph]] = {}


def _device_graph(graph: Any, device: torch.device) -> _DeviceGraph:
    """The graph's arrays on ``device``, copied once per graph and device."""
    key = (id(graph), str(device))
    hit = _DEVICE_GRAPHS.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    names = ("final_cost", "emit_offsets", "emit_ilabel", "emit_weight", "emit_next",
             "eps_offsets", "eps_weight", "eps_next")
    tensors = tuple(torch.from_numpy(np.ascontiguousarray(getattr(graph, n))).to(device)
                    for n in names)
    dg = _DeviceGraph(tensors, _Graph(graph.num_states, graph.start,
                                      *(t.data_ptr() for t in tensors)))
    _DEVICE_GRAPHS[key] = (graph, dg)
    return dg


def workspace_bytes(num_states: int, rows: int) -> int:
    """The dense per-state arrays a batch needs (the rest is small beside them)."""
    return 24 * num_states * rows


def serves(log_probs: torch.Tensor, loaded: Any, options: SearchOptions,
           boosting: Any = None) -> bool:
    if boosting is not None:
        return False
    free, _ = torch.cuda.mem_get_info(log_probs.device)
    return workspace_bytes(loaded.graph.num_states, log_probs.shape[0]) <= free // 4


def _frames(log_probs: torch.Tensor, lens: np.ndarray, options: SearchOptions
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per row the frames to decode (B, T) and their count (B,)."""
    B, T, _ = log_probs.shape
    frames = np.zeros((B, max(T, 1)), dtype=np.int32)
    counts = np.zeros(B, dtype=np.int32)
    if options.blank_skip_threshold >= 1.0:
        frames[:, :T] = np.arange(T, dtype=np.int32)
        counts[:] = lens
        return frames, counts
    blank = log_probs[:, :, options.blank].float().cpu().numpy()
    argmax = log_probs.argmax(-1).cpu().numpy()
    for b in range(B):
        kept = decoded_frames(blank[b], argmax[b], int(lens[b]), options.blank,
                              options.blank_skip_threshold)
        frames[b, :len(kept)] = kept
        counts[b] = len(kept)
    return frames, counts


def decode(log_probs: torch.Tensor, lens: torch.Tensor | None, loaded: Any,
           options: SearchOptions) -> list[WfstPath]:
    """(B, T, V) CUDA log-probs, (B,) lengths -> each row's best path (``WfstPath``)."""
    lib = _library()
    device = log_probs.device
    B, T, V = log_probs.shape
    graph = loaded.graph
    if graph.max_token >= V:
        raise ValueError(f"the graph's input labels reach token {graph.max_token} but the "
                         f"log-probs have {V} columns: the graph was built for another unit set")
    n = (np.full(B, T, dtype=np.int64) if lens is None
         else lens.detach().to("cpu", torch.int64).numpy())
    frames, counts = _frames(log_probs, n, options)
    dg = _device_graph(graph, device)
    search = _Search(options.beam, options.max_active, options.min_active, options.beam_delta,
                     options.acoustic_scale, options.blank_penalty, options.blank)
    lp = log_probs.to(torch.float32).contiguous()
    frames_dev = torch.from_numpy(frames).to(device)
    counts_dev = torch.from_numpy(counts).to(device)
    S, N = graph.num_states, frames.shape[1]
    capacity = min(S, 65536)
    arena = max(N, 1) * min(capacity, 8192) + 16
    path_capacity = 4 * max(N, 1) + 64
    for _ in range(_MAX_RETRIES):
        out = _launch(lib, dg, search, lp, frames_dev, counts_dev, (B, T, N, V), S, capacity,
                      arena, path_capacity)
        status = out["status"]
        grown = False
        if (status & STATUS["tokens_overflow"]).any() and capacity < S:
            capacity, grown = min(S, 2 * capacity), True
        if (status & STATUS["arena_overflow"]).any():
            arena, grown = 2 * arena, True
        if (status & STATUS["path_overflow"]).any():
            path_capacity, grown = 2 * path_capacity, True
        if not grown:
            break
    bad = status & (STATUS["tokens_overflow"] | STATUS["arena_overflow"] |
                    STATUS["path_overflow"])
    if bad.any():
        raise RuntimeError(f"wfst_cuda: rows {np.flatnonzero(bad).tolist()} outgrew the search "
                           "buffers after resizing; lower beam or max_active")
    paths = []
    for b in range(B):
        if status[b] & STATUS["no_token"]:
            paths.append(WfstPath.empty())
            continue
        arcs = out["path"][b, :out["length"][b]]
        paths.append(path_from_arcs(graph, arcs, frames[b, :counts[b]], float(out["cost"][b]),
                                    bool(status[b] & STATUS["reached_final"])))
    return paths


def _launch(lib: ctypes.CDLL, dg: _DeviceGraph, search: _Search, lp: torch.Tensor,
            frames: torch.Tensor, counts: torch.Tensor, shape: tuple[int, int, int, int],
            num_states: int, capacity: int, arena: int, path_capacity: int
            ) -> dict[str, np.ndarray]:
    B, T, N, V = shape
    dev = lp.device

    def full(size: int, value: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.full((size,), value, dtype=dtype, device=dev)

    key = full(B * num_states, -1, torch.int64)  # all bits set: no token yet
    bp = full(B * num_states, -1, torch.int64)
    slot = full(B * num_states, -1, torch.int32)
    stamp = full(B * num_states, 0, torch.int32)
    ints = torch.empty(B * (8 * capacity + 1), dtype=torch.int32, device=dev)
    costs = torch.empty(B * 2 * capacity, dtype=torch.float64, device=dev)
    fkeys = torch.empty(B * capacity, dtype=torch.float32, device=dev)
    arena_buf = torch.empty(B * 2 * arena, dtype=torch.int32, device=dev)
    path = torch.empty((B, path_capacity), dtype=torch.int32, device=dev)
    length = torch.zeros(B, dtype=torch.int32, device=dev)
    cost = torch.zeros(B, dtype=torch.float64, device=dev)
    status = torch.zeros(B, dtype=torch.int32, device=dev)
    batch = _Batch(*(t.data_ptr() for t in (lp, frames, counts, key, bp, slot, stamp, ints,
                                            costs, fkeys, arena_buf, path, length, cost,
                                            status)),
                   B, T, N, V, capacity, arena, path_capacity, 0)
    check(lib, lib.oasr_wfst_decode(ctypes.byref(dg.struct), ctypes.byref(search),
                                    ctypes.byref(batch), stream_handle(dev)), "wfst_cuda decode")
    return {"status": status.cpu().numpy(), "length": length.cpu().numpy(),
            "cost": cost.cpu().numpy(), "path": path.cpu().numpy()}


# Op ``wfst_search`` (routed by oasr.engine.decode.ctc_wfst): fn(log_probs, lens, loaded_graph,
# options) -> per row the best path; the route sees (log_probs, loaded_graph, options, boosting).
# Its oracle is oasr._C.wfst.device_search, the same header run serially on the host.
ops.register_kernel(ops.Kernel(op="wfst_search", fn=decode, library=WFST_CUDA,
                               source="oasr/csrc/kernels/wfst/wfst_cuda.cu", supports=serves))
