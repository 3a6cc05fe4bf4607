"""``ctc_cuda``: the CTC prefix beam search on the GPU (oasr/csrc/kernels/ctc/).

The same search as the CPU decoder (``oasr._C.ctc.prefix_beam``, stated in
oasr/csrc/host/ctc/prefix_beam.h): WeNet's ``ctc_prefix_beam_search`` with blank skipping, n-best,
and each token's emitting frame recorded on the hypothesis' best path as the beam extends (word
timings come free). Beam width up to 32, any vocabulary.

State lives in a ``CtcBeamPool``: a pool of stream slots on the device, each holding its beam,
its token trie and its frame arena, so a streaming chunk continues a beam where the last one
stopped, and an offline batch is one chunk per slot. ``finalize`` reads every ending stream
back in one device-to-host copy; ``finalize_async`` queues that copy behind an event and
returns at once.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from oasr.kernels import jit
from oasr.kernels._ctypes import check, ptr, stream_handle
from oasr.kernels.declarations import CTC_BEAM_WIDTH, MAX_BEAM
from oasr.ops.build import CTC_CUDA

__all__ = ["MAX_BEAM", "CTC_BEAM_WIDTH", "CtcBeamPool", "Hypothesis", "PendingHypotheses",
           "decode_offline", "decode_offline_async", "serves"]

_ERRORS = {1: "its token trie overflowed", 2: "its frame arena overflowed",
           3: "a hypothesis lost track of its frames", 4: "a chunk length was outside [0, T]"}

def serves(beam_size: int, nbest: int) -> bool:
    """Whether the kernel covers this search; the rest is the declared gap above."""
    return 1 <= nbest <= beam_size <= MAX_BEAM


class _Pool(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in (
        "beam", "scalars", "trie_parent", "trie_token", "trie_child", "trie_sibling",
        "frame_prev", "frame_t", "frame_lp", "saved_ids", "saved_vals", "pending_node",
        "pending_tok")] + [
        ("capacity", ctypes.c_int32), ("beam_size", ctypes.c_int32)]


class _FrameTops(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("ids", "vals", "next", "count",
                                                       "blank_lp")]


@dataclass(frozen=True)
class _Layout:
    beam_entry: int
    slot_scalars: int


@lru_cache(maxsize=1)
def _library() -> tuple[ctypes.CDLL, _Layout]:
    lib = jit.load(CTC_CUDA)  # argtypes from CTC_CUDA's checked table (struct pointers: ptr)
    entry, scalars, max_beam = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.oasr_ctc_sizes(ctypes.byref(entry), ctypes.byref(scalars), ctypes.byref(max_beam))
    if max_beam.value != MAX_BEAM:
        raise RuntimeError(f"libctc_cuda was built for beams up to {max_beam.value}, the binding "
                           f"expects {MAX_BEAM}")
    return lib, _Layout(entry.value, scalars.value)


@dataclass
class Hypothesis:
    """One decoded hypothesis: tokens, each one's emitting frame on the best path and its
    posterior (max over frames t, t + 1), and the prefix's log-probability."""

    tokens: np.ndarray
    frames: np.ndarray
    probs: np.ndarray
    score: float = 0.0


class PendingHypotheses:
    """The read-back of ``finalize_async``: ``result()`` waits for its event and unpacks."""

    def __init__(self, host: torch.Tensor, event: torch.cuda.Event, rows: int, nbest: int,
                 max_len: int, keep: tuple[object, ...]) -> None:
        self._host, self._event = host, event
        self._rows, self._nbest, self._max_len = rows, nbest, max_len
        self._keep = keep  # device buffers the copy reads, alive until it has run
        self._result: list[list[Hypothesis]] | None = None

    def ready(self) -> bool:
        return self._event.query()

    def result(self) -> list[list[Hypothesis]]:
        if self._result is None:
            self._event.synchronize()
            self._result = _unpack(self._host.numpy(), self._rows, self._nbest, self._max_len)
            self._keep = ()
        return self._result


def _sections(rows: int, nbest: int, max_len: int) -> dict[str, tuple[int, int, np.dtype]]:
    """Byte offset, element count and dtype of each part of the read-back buffer."""
    parts = (("counts", rows, np.int32), ("lengths", rows * nbest, np.int32),
             ("scores", rows * nbest, np.float64), ("tokens", rows * nbest * max_len, np.int32),
             ("frames", rows * nbest * max_len, np.int32),
             ("post_lp", rows * nbest * max_len, np.float32))
    out, offset = {}, 0
    for name, count, dtype in parts:
        out[name] = (offset, count, np.dtype(dtype))
        offset += -(-count * np.dtype(dtype).itemsize // 8) * 8
    out["_total"] = (offset, 0, np.dtype(np.uint8))
    return out


def _unpack(buf: np.ndarray, rows: int, nbest: int, max_len: int) -> list[list[Hypothesis]]:
    sec = _sections(rows, nbest, max_len)

    def part(name: str) -> np.ndarray:
        off, count, dtype = sec[name]
        return buf[off:off + count * dtype.itemsize].view(dtype)

    counts, lengths, scores = part("counts"), part("lengths"), part("scores")
    tokens = part("tokens").reshape(rows, nbest, max_len)
    frames = part("frames").reshape(rows, nbest, max_len)
    post = part("post_lp").reshape(rows, nbest, max_len)
    out: list[list[Hypothesis]] = []
    for r in range(rows):
        if counts[r] < 0:
            raise RuntimeError(f"ctc_cuda: stream row {r} is void: {_ERRORS.get(-counts[r], '?')}")
        hyps = []
        for n in range(counts[r]):
            length = int(lengths[r * nbest + n])
            if length < 0:
                raise RuntimeError(f"ctc_cuda: row {r} hypothesis {n}: "
                                   + _ERRORS.get(-length, f"longer than {max_len} tokens"))
            hyps.append(Hypothesis(tokens[r, n, :length].copy(), frames[r, n, :length].copy(),
                                   np.exp(post[r, n, :length].astype(np.float64)),
                                   float(scores[r * nbest + n])))
        out.append(hyps)
    return out


class CtcBeamPool:
    """Beam-search state for up to ``slots`` streams on ``device``.

    ``max_frames`` bounds the frames one stream may decode before it is finalized (each
    decoded frame appends at most ``beam_size`` trie and frame nodes); a stream that would pass
    it is refused before the launch.
    """

    def __init__(self, slots: int, beam_size: int, *, max_frames: int, blank: int = 0,
                 blank_skip_threshold: float = 1.0, device: torch.device | str = "cuda") -> None:
        if not 1 <= beam_size <= MAX_BEAM:
            raise ValueError(f"ctc_cuda serves beam_size 1..{MAX_BEAM}, got {beam_size}")
        if slots < 1 or max_frames < 1:
            raise ValueError("slots and max_frames must be >= 1")
        if not 0.0 < blank_skip_threshold <= 1.0:
            raise ValueError("blank_skip_threshold must be in (0, 1]")
        self.lib, layout = _library()
        self.device = torch.device(device)
        self.slots, self.beam_size, self.blank = slots, beam_size, blank
        self.blank_skip_threshold = float(blank_skip_threshold)
        self.max_frames = max_frames
        cap = 1 + max_frames * beam_size
        dev = self.device

        def ints(*shape: int) -> torch.Tensor:
            return torch.empty(shape, dtype=torch.int32, device=dev)

        self._beam = torch.empty(slots * beam_size * layout.beam_entry, dtype=torch.uint8,
                                 device=dev)
        self._scalars = torch.zeros(slots * layout.slot_scalars, dtype=torch.uint8, device=dev)
        self._trie_parent, self._trie_token = ints(slots, cap), ints(slots, cap)
        self._trie_child, self._trie_sibling = ints(slots, cap), ints(slots, cap)
        self._frame_prev, self._frame_t = ints(slots, cap), ints(slots, cap)
        self._frame_lp = torch.empty(slots, cap, dtype=torch.float32, device=dev)
        self._saved_ids = ints(slots, beam_size)
        self._saved_vals = torch.empty(slots, beam_size, dtype=torch.float32, device=dev)
        self._pending_node, self._pending_tok = ints(slots, beam_size), ints(slots, beam_size)
        self._struct = _Pool(*(t.data_ptr() for t in (
            self._beam, self._scalars, self._trie_parent, self._trie_token, self._trie_child,
            self._trie_sibling, self._frame_prev, self._frame_t, self._frame_lp,
            self._saved_ids, self._saved_vals, self._pending_node, self._pending_tok)), cap,
            beam_size)
        self._fed = np.zeros(slots, dtype=np.int64)  # frames given to each open slot
        self._open = np.zeros(slots, dtype=bool)
        self._slot_cache: dict[bytes, torch.Tensor] = {}

    # --- slots --------------------------------------------------------------------------------
    def open(self, n: int) -> list[int]:
        """Start ``n`` streams; returns their slots."""
        free = np.flatnonzero(~self._open)
        if len(free) < n:
            raise RuntimeError(f"ctc_cuda pool is full: {n} streams asked, {len(free)} of "
                               f"{self.slots} slots free; finalize or release some first")
        slots = [int(s) for s in free[:n]]
        self._open[slots] = True
        self._fed[slots] = 0
        idx = self._slot_tensor(slots)
        check(self.lib, self.lib.oasr_ctc_reset(ctypes.byref(self._struct), ptr(idx), len(slots),
                                                stream_handle(self.device)), "ctc_cuda reset")
        return slots

    def release(self, slots: Sequence[int]) -> None:
        self._open[list(slots)] = False

    def _slot_tensor(self, slots: Sequence[int]) -> torch.Tensor:
        arr = np.asarray(slots, dtype=np.int32)
        if arr.ndim != 1 or (arr < 0).any() or (arr >= self.slots).any():
            raise ValueError(f"slots must be in [0, {self.slots}), got {list(slots)}")
        if not self._open[arr].all():
            raise ValueError(f"slots {[int(s) for s in arr if not self._open[s]]} are not open")
        # A stream set's chunks reuse one device copy of its slot list (no copy per chunk).
        key = arr.tobytes()
        cached = self._slot_cache.get(key)
        if cached is None:
            if len(self._slot_cache) >= 64:
                self._slot_cache.clear()
            cached = torch.from_numpy(arr).to(self.device)
            self._slot_cache[key] = cached
        return cached

    # --- decoding -----------------------------------------------------------------------------
    def advance(self, slots: Sequence[int], log_probs: torch.Tensor,
                lens: torch.Tensor | Sequence[int] | None = None) -> None:
        """Continue each slot's beam over its row of ``log_probs`` (rows, T, V), the first
        ``lens[r]`` frames of row r (all T when ``lens`` is None)."""
        if log_probs.dim() != 3 or log_probs.shape[0] != len(slots):
            raise ValueError(f"log_probs must be (rows={len(slots)}, T, V), got "
                             f"{tuple(log_probs.shape)}")
        rows, T, V = log_probs.shape
        if not 0 <= self.blank < V:
            raise ValueError(f"blank id {self.blank} is outside the vocabulary [0, {V})")
        if log_probs.device != self.device and log_probs.device.type != self.device.type:
            raise ValueError(f"log_probs are on {log_probs.device}, the pool on {self.device}")
        idx = self._slot_tensor(slots)
        # The frames each slot may take: T (or the given length) must stay inside max_frames.
        host_lens = None
        if lens is None:
            lens_dev = torch.full((rows,), T, dtype=torch.int64, device=self.device)
            bound = np.full(rows, T)
        elif isinstance(lens, torch.Tensor) and lens.is_cuda:
            lens_dev = lens.to(self.device, torch.int64)
            bound = np.full(rows, T)  # the kernel voids a row whose length is outside [0, T]
        else:
            host_lens = np.asarray(lens.cpu() if isinstance(lens, torch.Tensor) else lens,
                                   dtype=np.int64)
            if host_lens.shape != (rows,) or (host_lens < 0).any() or (host_lens > T).any():
                raise ValueError(f"lens must be (rows,) with values in [0, T={T}], got "
                                 f"{host_lens.tolist()}")
            lens_dev = torch.from_numpy(host_lens).to(self.device, non_blocking=True)
            bound = host_lens
        over = self._fed[list(slots)] + bound > self.max_frames
        if over.any():
            raise RuntimeError(
                f"ctc_cuda: streams in slots {[s for s, o in zip(slots, over) if o]} would "
                f"decode more than max_frames={self.max_frames} frames; finalize them at an "
                "endpoint or build the pool with a larger max_frames")
        self._fed[list(slots)] += bound
        lp = log_probs.to(torch.float32).contiguous()
        k = min(self.beam_size, V)
        # Workspace: each frame's top k tokens, their log-probs now and at the next frame, the
        # count and the blank's log-prob, in one allocation.
        work = torch.empty(rows * T * (3 * k + 2), dtype=torch.int32, device=self.device)
        ids, vals, nxt, count, blank_lp = work.split([rows * T * k] * 3 + [rows * T] * 2)
        tops = _FrameTops(ids.data_ptr(), vals.data_ptr(), nxt.data_ptr(), count.data_ptr(),
                          blank_lp.data_ptr())
        check(self.lib, self.lib.oasr_ctc_chunk(
            ctypes.byref(self._struct), ptr(idx), rows, ptr(lp), ptr(lens_dev), T, V,
            ctypes.byref(tops), k, self.blank, self.blank_skip_threshold,
            stream_handle(self.device)), "ctc_cuda chunk")

    def finalize_async(self, slots: Sequence[int], nbest: int = 1) -> PendingHypotheses:
        """Queue the read-back of each slot's ``nbest`` best hypotheses (one kernel, one copy
        into pinned memory behind an event) and release the slots."""
        if not 1 <= nbest <= self.beam_size:
            raise ValueError(f"nbest must be in [1, beam_size={self.beam_size}], got {nbest}")
        idx = self._slot_tensor(slots)
        rows = len(slots)
        max_len = max(1, int(self._fed[list(slots)].max())) if rows else 1
        sec = _sections(rows, nbest, max_len)
        dev = torch.empty(sec["_total"][0], dtype=torch.uint8, device=self.device)

        def at(name: str) -> ctypes.c_void_p:
            return ctypes.c_void_p(dev.data_ptr() + sec[name][0])

        stream = stream_handle(self.device)
        check(self.lib, self.lib.oasr_ctc_finalize(
            ctypes.byref(self._struct), ptr(idx), rows, nbest, max_len, at("counts"),
            at("lengths"), at("scores"), at("tokens"), at("frames"), at("post_lp"), stream),
            "ctc_cuda finalize")
        host = torch.empty(dev.numel(), dtype=torch.uint8, pin_memory=True)
        host.copy_(dev, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.release(slots)
        return PendingHypotheses(host, event, rows, nbest, max_len, (dev, idx, self))

    def finalize(self, slots: Sequence[int], nbest: int = 1) -> list[list[Hypothesis]]:
        return self.finalize_async(slots, nbest).result()


def decode_offline_async(log_probs: torch.Tensor, lens: torch.Tensor | None, *, blank: int,
                         beam_size: int, blank_skip_threshold: float = 1.0,
                         nbest: int = 1) -> PendingHypotheses:
    """(B, T, V) CUDA log-probs -> the pending per-row hypotheses, best first."""
    B, T, _ = log_probs.shape
    pool = CtcBeamPool(max(B, 1), beam_size, max_frames=max(T, 1), blank=blank,
                       blank_skip_threshold=blank_skip_threshold, device=log_probs.device)
    slots = pool.open(B)
    pool.advance(slots, log_probs, lens)
    return pool.finalize_async(slots, nbest)


def decode_offline(log_probs: torch.Tensor, lens: torch.Tensor | None, *, blank: int,
                   beam_size: int, blank_skip_threshold: float = 1.0,
                   nbest: int = 1) -> list[list[Hypothesis]]:
    return decode_offline_async(log_probs, lens, blank=blank, beam_size=beam_size,
                                blank_skip_threshold=blank_skip_threshold, nbest=nbest).result()


def route_supports(log_probs: torch.Tensor, beam_size: int, nbest: int) -> bool:
    """Op ``ctc_prefix_beam``'s ``supports``: the route sees (log_probs, beam_size, nbest)."""
    return serves(beam_size, nbest)
