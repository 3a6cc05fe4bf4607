"""The ``slot`` streaming runtime: every per-stream state tensor is fixed-extent, so the whole
cache lives in preallocated slot tensors and a cohort is one gather -> forward -> scatter.

The encoder declares its state list as ``slot_state_specs`` (``StreamingStateSpec``: the
per-stream shape, where ``streaming_forward`` wants the batch axis and the initial fill) plus
``streaming_pad_value`` (what a padding row's chunk is filled with). Slot ``max_streams`` is the
padding lane: a cohort of B streams is padded to the next power of two with rows that read and
write only that lane, so one CUDA graph per power-of-two width (and chunk length) serves every
cohort size. On CUDA the step is captured (``use_cuda_graphs``); elsewhere it runs eagerly with
the same padding, so both paths compute the same thing. The lane is reset to its fill after
each step. Float states with no declared dtype, and the chunks, are kept in the model's
``dtype`` when the backend is given one.

A replayed graph writes into static buffers; ``forward_step`` returns copies, so an output stays
valid across later steps.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.engine.stateful_backend import check_list_api
from oasr.engine.streaming_backend import StreamingEncoderBackend


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class SlotStreamingBackend(StreamingEncoderBackend):
    def __init__(self, model: Any, max_streams: int = 64, device: torch.device | str | None = None,
                 use_cuda_graphs: bool | None = None, pad_to_pow2: bool = True,
                 dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        super().__init__(model)
        check_list_api(self.encoder, "slot")
        specs = getattr(self.encoder, "slot_state_specs", None)
        if not specs:
            raise ValueError(
                f"{type(self.encoder).__name__} declares streaming_kind='slot' but no "
                "slot_state_specs; declare every state tensor (fixed extent) or use 'stateful'")
        self.specs = list(specs)
        self.pad_value = float(getattr(self.encoder, "streaming_pad_value", 0.0))
        self.device = torch.device(device or "cpu")
        # The model's compute dtype: chunks and the float states (spec dtype None) are kept in
        # it, so a half-precision encoder never sees float32 caches.
        self.dtype = dtype
        self.max_streams = max_streams
        self.pad_lane = max_streams
        # (max_streams + 1, *shape) per state; the last slot is the padding lane.
        self._dims = [s.batch_dim for s in self.specs]
        self._fills = [s.fill for s in self.specs]
        self.cache = [torch.full((max_streams + 1, *s.shape), s.fill, device=self.device,
                                 dtype=s.dtype or dtype or torch.float32)
                      for s in self.specs]
        self.slot_of: dict[int, int] = {}
        self._free = list(range(max_streams - 1, -1, -1))
        cuda = self.device.type == "cuda"
        self.use_cuda_graphs = cuda if use_cuda_graphs is None else use_cuda_graphs and cuda
        self.pad_to_pow2 = pad_to_pow2 or self.use_cuda_graphs
        self._graphs: dict[tuple[int, tuple[int, ...]], Any] = {}

    # -- slots --------------------------------------------------------------------------------
    def allocate(self, stream_id: int) -> None:
        if stream_id in self.slot_of:
            raise ValueError(f"stream {stream_id} is already allocated")
        if not self._free:
            raise RuntimeError(f"all {self.max_streams} slots are in use; free a stream or "
                               "build the backend with a larger max_streams")
        slot = self._free.pop()
        for c, fill in zip(self.cache, self._fills):
            c[slot].fill_(fill)
        self.slot_of[stream_id] = slot

    def free(self, stream_id: int) -> None:
        slot = self.slot_of.pop(stream_id, None)
        if slot is not None:
            self._free.append(slot)

    # -- the step -----------------------------------------------------------------------------
    def _step(self, idx: torch.Tensor, chunks: torch.Tensor, lens: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        states = [c.index_select(0, idx).movedim(0, d) for c, d in zip(self.cache, self._dims)]
        out, out_lens, new = self.encoder.streaming_forward(chunks, lens, states)
        for c, d, n in zip(self.cache, self._dims, new):
            c.index_copy_(0, idx, n.movedim(d, 0).to(c.dtype))
        for c, fill in zip(self.cache, self._fills):
            c[self.pad_lane].fill_(fill)
        return out, out_lens

    def forward_step(self, stream_ids: list[int], chunks: torch.Tensor,
                     chunk_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        unknown = [i for i in stream_ids if i not in self.slot_of]
        if unknown:
            raise KeyError(f"streams {unknown} were not allocated")
        b = len(stream_ids)
        if chunk_lens is None:
            chunk_lens = torch.full((b,), chunks.shape[1], dtype=torch.int64)
        width = _pow2(b) if self.pad_to_pow2 else b
        slots = [self.slot_of[i] for i in stream_ids] + [self.pad_lane] * (width - b)
        idx = torch.tensor(slots, dtype=torch.int64, device=self.device)
        if width > b:
            pad = chunks.new_full((width - b, *chunks.shape[1:]), self.pad_value)
            chunks = torch.cat([chunks, pad])
            chunk_lens = torch.cat([chunk_lens.to(self.device),
                                    torch.full((width - b,), chunks.shape[1], dtype=torch.int64,
                                               device=self.device)])
        chunks = chunks.to(self.device, self.dtype or chunks.dtype)
        chunk_lens = chunk_lens.to(self.device)
        if self.use_cuda_graphs:
            out, out_lens = self._replay(idx, chunks, chunk_lens)
        else:
            out, out_lens = self._step(idx, chunks, chunk_lens)
        return out[:b], out_lens[:b]

    def _replay(self, idx: torch.Tensor, chunks: torch.Tensor, lens: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        key = (idx.shape[0], tuple(chunks.shape[1:]))
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(idx, chunks, lens)
            self._graphs[key] = entry
        graph, s_idx, s_chunks, s_lens, s_out, s_out_lens = entry
        s_idx.copy_(idx)
        s_chunks.copy_(chunks)
        s_lens.copy_(lens)
        graph.replay()
        return s_out.clone(), s_out_lens.clone()

    def _capture(self, idx: torch.Tensor, chunks: torch.Tensor, lens: torch.Tensor) -> tuple:
        s_idx, s_chunks, s_lens = idx.clone(), chunks.clone(), lens.clone()
        # Warm-up must not advance real streams: run it on the padding lane only.
        warm_idx = torch.full_like(s_idx, self.pad_lane)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step(warm_idx, s_chunks, s_lens)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        s_idx.fill_(self.pad_lane)
        with torch.cuda.graph(graph):
            s_out, s_out_lens = self._step(s_idx, s_chunks, s_lens)
        return graph, s_idx, s_chunks, s_lens, s_out, s_out_lens
