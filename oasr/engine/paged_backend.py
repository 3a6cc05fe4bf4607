"""The ``paged`` streaming runtime: attention K/V growing per stream in a paged pool, the
fixed-extent states (``streaming_state_specs``) in a slot cache beside it.

For chunk-wise attention encoders (WeNet's U2 / U2++ Conformer): each step writes the chunk's
K/V of every layer into the stream's blocks of one ``BlockPool`` and attends over the stream's
left window (``fixed_attention_window`` frames, or every earlier frame); blocks older than the
window return to the pool, so a windowed stream holds a bounded number of blocks however long
it runs. The encoder implements ``forward_chunk_paged(features, lengths, kv, states)`` and
``output_lengths(lengths)``. Eager (chunk widths vary with each cohort's block tables).

Cohort widths are bucketed on CUDA (``bucket_cohorts``): a step of ``n`` streams runs
``next_power_of_two(n)`` rows, the extra ones scratch streams opened for the step and closed
after it (zero chunks, outputs dropped). On the H200 a step at a batch width it has not seen
costs 180-320 ms (convolution plans are built per shape) against a steady ~30 ms at any width
from 1 to 512 (``benchmarks/gpu_stream_step_profile.py``); with streams arriving at their own
times every cohort width occurs, so unbucketed the first-shape cost lands on live partials.
``warm_up()`` runs each bucket once before streams arrive (the concurrency benchmark calls it;
the chunk-wise recognizer does not yet, so there each bucket pays its first step once).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from oasr.cache.paged import BlockPool
from oasr.cache.paged_stream import StreamKvPages
from oasr.engine.streaming_backend import StreamingEncoderBackend

# Frames a stream may hold when the encoder attends over every earlier frame (no window):
# 5 minutes at 40 ms per frame; past it the pool is exhausted, naming the window option.
UNWINDOWED_FRAMES = 7500


class PagedStreamingBackend(StreamingEncoderBackend):
    """Args:
        model: a model (or encoder) whose encoder declares ``streaming_kind="paged"``.
        max_streams: streams open at once (the state slots; the pool is sized for them).
        block_size: K/V positions per block.
        num_blocks: pool size (the null block included); default: ``max_streams`` full
            windows of ``window + chunk`` frames, or ``UNWINDOWED_FRAMES`` without a window.
        device / dtype: where the pool and states live (default: the model's).
    """

    def __init__(self, model: Any, max_streams: int = 64, block_size: int = 16,
                 num_blocks: int | None = None, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, bucket_cohorts: bool | None = None,
                 **kwargs: Any) -> None:
        super().__init__(model)
        enc = self.encoder
        for member in ("forward_chunk_paged", "output_lengths"):
            if not callable(getattr(enc, member, None)):
                raise ValueError(f"{type(enc).__name__} declares streaming_kind='paged' but "
                                 f"lacks {member}")
        param = next(enc.parameters())
        self.device = torch.device(device) if device is not None else param.device
        self.dtype = dtype or param.dtype
        attn = enc.encoders[0].self_attn
        self.window: int | None = enc.fixed_attention_window
        chunk = enc.streaming_chunk_frames or 1
        per_stream = (self.window + chunk) if self.window is not None else UNWINDOWED_FRAMES
        self.bucket = self.device.type == "cuda" if bucket_cohorts is None else bucket_cohorts
        # Scratch rows fill a cohort to its power of two: fewer than half the bucket.
        spare = (1 << max(0, (max_streams - 1).bit_length())) // 2 if self.bucket else 0
        self._scratch = [-(i + 1) for i in range(spare)]
        slots = max_streams + spare
        if num_blocks is None:
            # a scratch row lives one step: one chunk's blocks
            num_blocks = (max_streams * (math.ceil(per_stream / block_size) + 1)
                          + spare * (math.ceil(chunk / block_size) + 1) + 1)
        self.pool = BlockPool(len(enc.encoders), num_blocks, block_size, attn.heads,
                              attn.head_dim, self.device, self.dtype)
        self.pages = StreamKvPages(self.pool, self.window)
        self.specs = list(enc.streaming_state_specs)
        self.max_streams = max_streams
        self.cache = [torch.full((slots, *s.shape), s.fill, device=self.device,
                                 dtype=s.dtype or self.dtype) for s in self.specs]
        self.slot_of: dict[int, int] = {}
        self._free = list(range(slots - 1, -1, -1))
        self._streams = 0

    def allocate(self, stream_id: int) -> None:
        if stream_id < 0:
            raise ValueError(f"stream ids are >= 0 (negative ones are scratch rows), got "
                             f"{stream_id}")
        if stream_id in self.slot_of:
            raise ValueError(f"stream {stream_id} is already allocated")
        if self._streams >= self.max_streams:
            raise RuntimeError(f"all {self.max_streams} stream slots are in use; free a stream "
                               "or build the backend with a larger max_streams")
        self._open(stream_id)
        self._streams += 1

    def _open(self, stream_id: int) -> None:
        slot = self._free.pop()
        for c, s in zip(self.cache, self.specs):
            c[slot].fill_(s.fill)
        self.slot_of[stream_id] = slot
        self.pages.open(stream_id)

    def free(self, stream_id: int) -> None:
        slot = self.slot_of.pop(stream_id, None)
        if slot is not None:
            self._free.append(slot)
            self.pages.close(stream_id)
            if stream_id >= 0:
                self._streams -= 1

    def buckets(self) -> list[int]:
        """The cohort widths steps run at (powers of two up to ``max_streams``' bucket)."""
        top = 1 << max(0, (self.max_streams - 1).bit_length())
        return [1 << i for i in range(top.bit_length())] if self.bucket else []

    def warm_up(self, chunk_frames: int, feature_dim: int) -> None:
        """One step at every bucket width, before any stream is open (scratch rows only, zero
        chunks of ``chunk_frames`` x ``feature_dim``), so no live step meets a new shape."""
        if self.slot_of:
            raise RuntimeError("warm_up runs before any stream is allocated")
        for width in self.buckets():
            rows = [-(i + 1) for i in range(width)]
            for sid in rows:
                self._open(sid)
            try:
                self._step(rows, torch.zeros(width, chunk_frames, feature_dim), None)
            finally:
                for sid in rows:
                    self.free(sid)

    def frames(self, stream_id: int) -> int:
        """Encoder frames the stream has produced so far."""
        return self.pages.end(stream_id)

    @torch.inference_mode()
    def forward_step(self, stream_ids: list[int], chunks: torch.Tensor,
                     chunk_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        unknown = [i for i in stream_ids if i not in self.slot_of or i < 0]
        if unknown:
            raise KeyError(f"streams {unknown} were not allocated")
        n = len(stream_ids)
        width = 1 << max(0, (n - 1).bit_length()) if self.bucket and n else n
        if width == n:
            return self._step(stream_ids, chunks, chunk_lens)
        pads = self._scratch[:width - n]
        if chunk_lens is None:
            chunk_lens = torch.full((n,), chunks.shape[1], dtype=torch.int64)
        chunks = torch.cat([chunks, chunks.new_zeros(len(pads), *chunks.shape[1:])])
        chunk_lens = torch.cat([chunk_lens.cpu(), torch.full((len(pads),), chunks.shape[1],
                                                             dtype=chunk_lens.dtype)])
        for sid in pads:
            self._open(sid)
        try:
            out, out_lens = self._step(list(stream_ids) + pads, chunks, chunk_lens)
        finally:
            for sid in pads:
                self.free(sid)
        return out[:n], out_lens[:n]

    def _step(self, stream_ids: list[int], chunks: torch.Tensor,
              chunk_lens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if chunk_lens is None:
            chunk_lens = torch.full((len(stream_ids),), chunks.shape[1], dtype=torch.int64)
        new = self.encoder.output_lengths(chunk_lens.cpu()).tolist()
        kv = self.pages.prepare(stream_ids, new, self.device)
        idx = torch.tensor([self.slot_of[i] for i in stream_ids], device=self.device)
        states = [c.index_select(0, idx) for c in self.cache]
        out, out_lens, new_states = self.encoder.forward_chunk_paged(
            chunks.to(self.device, self.dtype), chunk_lens.to(self.device), kv, states)
        for c, n in zip(self.cache, new_states):
            c.index_copy_(0, idx, n.to(c.dtype))
        self.pages.commit(stream_ids, new)
        return out, out_lens
